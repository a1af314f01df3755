//! End-to-end tests: one binary, a module per area.

mod index;
mod pack;
mod ls_get;
mod stage;
mod stat;
mod verify;
