//! End-to-end tests: one binary, a module per area.
