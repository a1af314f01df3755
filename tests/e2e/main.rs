//! End-to-end tests: one binary, a module per area.

mod append;
mod append_more;
mod bench;
mod cli;
mod common;
mod convert;
mod crash;
mod data_loss;
mod errors;
mod format_interop;
#[cfg(feature = "hdf5")]
mod h5;
mod hangs;
mod image;
mod index;
mod ls_get;
mod migrate;
mod output_escaping;
mod pack;
mod reader;
mod relay;
mod remote;
mod remote_append;
mod remote_write;
mod slurm;
mod spill;
mod stage;
mod stat;
mod store;
mod verify;
mod write_checks;
mod wrong_success;
