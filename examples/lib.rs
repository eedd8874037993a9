//! Shared code of the noetic examples (none yet); each example is its own target.
