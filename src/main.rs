//! `hossted-operator`: keeps an inventory of every Helm release in a
//! Kubernetes cluster and reports it to the Hossted API.
//!
//! `crd` works; `run` and `collect` arrive with the operator issue.

use clap::{Parser, Subcommand};

/// Keeps an inventory of every Helm release in a cluster — its pods,
/// services, volumes and ingresses — and reports it to the Hossted API.
#[derive(Debug, Parser)]
#[command(name = "hossted-operator", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the operator (the default).
    Run,
    /// Print the apps payload for the current kubeconfig context and exit.
    Collect,
    /// Print the Hosstedproject CustomResourceDefinition as YAML.
    Crd,
}

fn main() -> std::process::ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    match cli.command.unwrap_or(Cmd::Run) {
        Cmd::Crd => {
            print!("{}", apis::crd_yaml());
            std::process::ExitCode::SUCCESS
        }
        cmd => {
            eprintln!("hossted-operator: `{cmd:?}` is not implemented yet");
            std::process::ExitCode::from(2)
        }
    }
}
