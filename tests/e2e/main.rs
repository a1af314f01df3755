//! End-to-end tests: one binary, a module per area.

mod format_interop;
mod image;
mod index;
mod ls_get;
mod pack;
mod stage;
mod stat;
mod verify;
