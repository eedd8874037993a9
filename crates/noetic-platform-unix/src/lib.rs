//! # noetic-platform-unix
//!
//! The real operating system behind `noetic-core`'s platform adapters:
//!
//! - [`LocalFs`]: a directory as an [`FsAdapter`](noetic_core::adapter::FsAdapter); every path is
//!   resolved by the kernel beneath the root (`openat2(RESOLVE_BENEATH)`, or component by component
//!   with `O_NOFOLLOW`), so `..`, absolute paths and symlinks that lead outside are refused with
//!   `FS_PATH_REFUSED`, with no check-then-open race.
//! - [`LocalShell`]: `sh -c` in its own process group with a cwd inside the root, a timeout that kills
//!   the whole group, capped output and an allow-listed environment (no API key unless named).
//!
//! - [`LocalSubprocess`]: the steps of a [`StepRegistry`](noetic_core::StepRegistry) in child
//!   processes of this program (re-executed; its `main` calls [`serve_if_child`]), each leading a
//!   process group of its own, speaking numbered, acknowledged JSON lines over a Unix socket, with a
//!   durable manifest per live child so a restarted host rejoins the detached ones.
//!
//! A zero-config harness stays sandboxed (in-memory fs, no shell, steps in process); this crate is
//! what a program adds to reach the machine:
//!
//! ```no_run
//! use noetic_core::{AgentHarness, Environment};
//! use noetic_platform_unix::{LocalFs, LocalShell};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let fs = LocalFs::rooted("./workspace")?;
//! let shell = LocalShell::new(&fs);
//! let harness = AgentHarness::builder("agent")
//!     .environment(Environment::new().fs(fs).shell(shell))
//!     .build()?;
//! # let _ = harness; Ok(()) }
//! ```

mod fs;
mod group;
mod shell;
mod subprocess;

pub use fs::{LocalFs, Resolution};
pub use shell::{DEFAULT_ENV, DEFAULT_OUTPUT_CAP, DEFAULT_TIMEOUT, LocalShell};
pub use subprocess::{
    DEFAULT_LINGER, DEFAULT_STARTUP_TIMEOUT, LocalSubprocess, MANIFEST_PREFIX, SubprocessError,
    serve_if_child, serve_if_child_async,
};
