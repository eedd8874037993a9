//! Token usage and cost accounting.
//!
//! `cached_tokens`, `reasoning_tokens` and `cache_write_tokens` are `Option`: a provider that never reported them leaves them
//! absent, which is not the same as a reported zero. Sums keep that distinction: absent + absent is
//! absent, absent + 4 is 4.

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

/// Tokens used by one or more model rounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Input (prompt) tokens, cached ones included.
    pub input_tokens: u64,
    /// Output (completion) tokens, reasoning ones included.
    pub output_tokens: u64,
    /// Input tokens served from the provider's cache, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// Output tokens spent on reasoning, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Input tokens written to the provider's prompt cache, when reported (Anthropic's
    /// `cache_creation_input_tokens`): part of `input_tokens`, billed above the input price, and not
    /// `cached_tokens` (which the cache served).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
}

impl TokenUsage {
    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// Whether nothing was used.
    pub fn is_zero(&self) -> bool {
        self.input_tokens == 0
            && self.output_tokens == 0
            && self.cached_tokens.is_none()
            && self.reasoning_tokens.is_none()
            && self.cache_write_tokens.is_none()
    }
}

fn add_optional(left: Option<u64>, right: Option<u64>) -> Option<u64> {
    match (left, right) {
        (None, None) => None,
        (left, right) => Some(left.unwrap_or(0) + right.unwrap_or(0)),
    }
}

impl Add for TokenUsage {
    type Output = TokenUsage;

    fn add(self, other: TokenUsage) -> TokenUsage {
        TokenUsage {
            input_tokens: self.input_tokens + other.input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
            cached_tokens: add_optional(self.cached_tokens, other.cached_tokens),
            cache_write_tokens: add_optional(self.cache_write_tokens, other.cache_write_tokens),
            reasoning_tokens: add_optional(self.reasoning_tokens, other.reasoning_tokens),
        }
    }
}

impl AddAssign for TokenUsage {
    fn add_assign(&mut self, other: TokenUsage) {
        *self = *self + other;
    }
}

/// Usage plus cost: what a context, a step or a round spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    /// Tokens.
    pub usage: TokenUsage,
    /// Cost in USD, when the provider reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

impl AddAssign for Spend {
    fn add_assign(&mut self, other: Spend) {
        self.usage += other.usage;
        self.cost = match (self.cost, other.cost) {
            (None, None) => None,
            (left, right) => Some(left.unwrap_or(0.0) + right.unwrap_or(0.0)),
        };
    }
}
