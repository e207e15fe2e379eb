//! The `circus` binary: clap glue over the library crates, one module per
//! subcommand.

mod sim;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "circus",
    version,
    about = "Content server for large, popular files: one storage read serves every client"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulate a server, its disk and its clients with the real scheduler.
    Sim(sim::SimArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Sim(args) => sim::main(args),
    }
}
