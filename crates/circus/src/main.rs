//! The `circus` binary: clap glue over the library crates, one module per
//! subcommand.

mod allocator;
mod bench;
mod get;
mod index;
mod serve;
mod sign;
mod sim;
mod sim_cluster;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "circus",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("CIRCUS_COMMIT"), ")"),
    about = "Content server for large, popular files: one storage read serves every client"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// The variants' docs are `--help` text: `[[private]]` is a TOML table.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the files of a directory over HTTP/1.1 and HTTP/2.
    Serve(Box<serve::ServeArgs>),
    /// Measure real servers over real sockets (amplification, hot, slow).
    Bench(bench::BenchArgs),
    /// Simulate a server, its disk and its clients with the real scheduler.
    Sim(sim::SimArgs),
    /// Simulate a cluster of nodes under a flash crowd (origin load, balance, failures).
    SimCluster(sim_cluster::SimClusterArgs),
    /// Download a file: natively from a circus server, over plain HTTP from any other.
    Get(get::GetArgs),
    /// Build the hash indexes of a directory's files ahead of serving.
    Index(index::IndexArgs),
    /// Print a signed URL for a path under a [[private]] prefix.
    Sign(sign::SignArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
    /// Print the manual page (roff): circus man > circus.1
    Man,
}

fn main() {
    allocator::give_back_freed_memory_at_once();
    // Usage errors exit 1, as every subcommand documents; clap's default of
    // 2 would collide with `circus get`'s "network failure". Help and
    // version still exit 0.
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        let code = if e.use_stderr() { 1 } else { 0 };
        let _ = e.print();
        std::process::exit(code)
    });
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CIRCUS_LOG").unwrap_or_else(|_| "info,fuser=warn".into()),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never into files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let result = match cli.command {
        Command::Serve(args) => serve::main(*args),
        Command::Sim(args) => sim::main(args),
        Command::SimCluster(args) => sim_cluster::main(args),
        Command::Bench(args) => bench::main(args),
        Command::Get(args) => get::main(args),
        Command::Index(args) => index::main(args),
        Command::Sign(args) => sign::main(args),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "circus", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => man(),
    };
    // One line naming the problem and its cause chain, never a backtrace.
    if let Err(e) = result {
        // `circus man | head`: the reader left; nothing went wrong here.
        if e.chain()
            .any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe))
        {
            std::process::exit(0);
        }
        eprintln!("circus: {e:#}");
        std::process::exit(1);
    }
}

/// The manual: `circus` and each subcommand as its own section.
fn man() -> anyhow::Result<()> {
    let cmd = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_mangen::Man::new(cmd.clone()).render(&mut out)?;
    for sub in cmd.get_subcommands().filter(|s| !matches!(s.get_name(), "completions" | "man" | "help")) {
        let name: &'static str = format!("circus-{}", sub.get_name()).leak();
        clap_mangen::Man::new(sub.clone().name(name)).render(&mut out)?;
    }
    Ok(())
}
