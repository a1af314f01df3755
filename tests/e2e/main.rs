//! End-to-end tests: one binary, a module per area.

mod format_interop;
mod index;
mod pack;
mod ls_get;
mod stage;
mod stat;
mod verify;
