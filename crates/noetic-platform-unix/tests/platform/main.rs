//! `noetic-platform-unix` against the real OS: files under a temp root, real shell processes and real
//! child processes.

mod fs;
mod shell;
mod subprocess;
