//! `noetic`: run and chat with JSON workflows from the command line.
//!
//! ```text
//! noetic run examples/workflows/researcher.json "Find recent AI news"
//! noetic chat examples/workflows/researcher.json
//! noetic serve examples/workflows/researcher.json                # http://127.0.0.1:8787/
//! noetic validate examples/workflows/multi-model-judge.json
//! noetic run flow.json "Plan a trip" --storage sqlite:runs.db   # prints `execution: ID`
//! noetic resume ID --storage sqlite:runs.db
//! noetic spend --storage sqlite:runs.db                          # the paid calls left unpriced
//! ```
//!
//! Exit codes: 0 success; 2 usage error or invalid workflow (the message names the file and the JSON
//! pointer); 1 runtime failure, printed as `error[CODE]: message`; 128 + N when `run` was stopped by
//! signal N (143 for SIGTERM, 130 for SIGINT; see `--drain-ms`).
//!
//! With `--otlp-endpoint URL` or `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces or metrics endpoint)
//! set, the command's spans and metrics are exported over OTLP/HTTP (`noetic-otel`) and flushed
//! before it exits (`OTEL_METRICS_EXPORTER=none`: spans only).

mod args;
mod chat;
mod durable;
mod output;
mod provider;
mod restate;
mod run;
mod serve;
mod signals;
mod tools;
mod workflow;

use std::process::ExitCode;

/// Why the command failed, deciding the exit code.
pub(crate) enum Failure {
    /// Bad arguments or an invalid workflow: exit 2.
    Usage(String),
    /// A runtime error: exit 1, printed with its code.
    Runtime(noetic_core::Error),
    /// Stopped by this signal (its report already printed): exit 128 + its number.
    Signal(i32),
    /// A CLI-level refusal with its own stable code (`APPROVAL_REQUIRED`): exit 1.
    Refused { code: &'static str, message: String },
}

impl From<noetic_core::Error> for Failure {
    fn from(error: noetic_core::Error) -> Self {
        Failure::Runtime(error)
    }
}

impl From<noetic_providers::ProviderError> for Failure {
    fn from(error: noetic_providers::ProviderError) -> Self {
        Failure::Runtime(error.into_core("cli", None))
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let (command, options) = match args::parse(&argv) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("error: {message}\n\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    // With an OTLP endpoint in the environment, every span of the command and its metrics are
    // exported, and flushed (bounded) before the process exits, whatever the outcome (a signal
    // included: `run` and `chat` return then, and the guard is shut down below).
    let otel = match &options.otlp_endpoint {
        Some(endpoint) => Some(noetic_otel::init_with_endpoint(endpoint)),
        None if noetic_otel::configured() => Some(noetic_otel::init()),
        None => None,
    };
    let otel = match otel.transpose() {
        Ok(guard) => guard,
        Err(error) => {
            eprintln!("error[{}]: {error}", error.code());
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match command {
            args::Command::Help => {
                println!("{}", args::USAGE);
                Ok(())
            }
            args::Command::Version => {
                println!("noetic {}", env!("CARGO_PKG_VERSION"));
                Ok(())
            }
            args::Command::Validate { flow } => workflow::validate(&flow),
            args::Command::Run { flow, prompt } => run::run(&flow, prompt, &options).await,
            args::Command::Resume { execution_id } => {
                durable::resume(&execution_id, &options).await
            }
            args::Command::Chat { flow, jsonl } => chat::chat(&flow, jsonl, &options).await,
            args::Command::Serve { flow } => serve::serve(&flow, &options).await,
            args::Command::Spend => durable::spend(&options).await,
        }
    });
    // Ends what still runs (its spans with it) before the last spans are exported. Bounded: a
    // blocking stdin read (chat) cannot be cancelled and would otherwise hold the exit until a
    // line arrives.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    if let Some(otel) = otel
        && let Err(error) = otel.shutdown()
    {
        eprintln!("warning[{}]: {error}", error.code());
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Signal(signo)) => ExitCode::from(u8::try_from(128 + signo).unwrap_or(u8::MAX)),
        Err(Failure::Refused { code, message }) => {
            eprintln!("error[{code}]: {message}");
            ExitCode::from(1)
        }
        Err(Failure::Usage(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Runtime(error)) => {
            let code = error.code();
            let message = error.to_string();
            // Some errors (a provider's configuration, a missing key) already start with their code.
            let message = message
                .strip_prefix(code)
                .and_then(|rest| rest.strip_prefix(": "))
                .unwrap_or(&message);
            eprintln!("error[{code}]: {message}");
            ExitCode::from(1)
        }
    }
}
