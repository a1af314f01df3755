//! End-to-end tests: one binary, a module per area.

mod bench;
mod format_interop;
mod index;
mod ls_get;
mod pack;
mod reader;
mod stage;
mod stat;
mod verify;
