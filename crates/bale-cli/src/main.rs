//! The `bale` command-line tool.
fn main() {}
