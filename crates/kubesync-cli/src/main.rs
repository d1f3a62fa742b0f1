//! The `kubesync` executable.
#![forbid(unsafe_code)]

mod cli;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    cli::main().await
}
