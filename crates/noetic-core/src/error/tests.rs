//! The codes table against the variants.

use super::*;

#[test]
fn every_code_is_listed_once() {
    let samples = [
        Error::NoStepConfigured,
        Error::Cancelled { reason: None },
        Error::Adapter {
            code: "X",
            source: "y".into(),
        },
    ];
    for sample in &samples[..2] {
        assert!(CODES.iter().any(|(code, _)| *code == sample.code()));
    }
    let mut seen = std::collections::HashSet::new();
    for (code, meaning) in CODES {
        assert!(seen.insert(*code), "duplicate code {code}");
        assert!(!meaning.is_empty());
        assert!(
            code.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
            "{code}"
        );
    }
}

#[test]
fn every_code_arm_is_in_the_table() {
    // Read our own source: every string literal returned by `code()` must be listed in CODES.
    let source = include_str!("../error.rs");
    let body = source
        .split("pub fn code(&self)")
        .nth(1)
        .expect("code() present");
    let body = body
        .split("pub fn is_cancelled")
        .next()
        .expect("end of code()");
    let mut count = 0;
    for line in body.lines() {
        if let Some(code) = line
            .split("=> \"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        {
            count += 1;
            assert!(
                CODES.iter().any(|(listed, _)| *listed == code),
                "{code} missing from CODES"
            );
        }
    }
    // The fs, shell and subprocess adapters' codes travel in `Error::Adapter`, not in variants of their own.
    let adapter_codes = [
        "FS_PATH_REFUSED",
        "FS_NOT_FOUND",
        "FS_NOT_A_DIRECTORY",
        "FS_IS_A_DIRECTORY",
        "FS_NOT_EMPTY",
        "FS_IO",
        "SHELL_SPAWN_FAILED",
        "SUBPROCESS_FAILED",
        "SUBPROCESS_MANIFEST_CORRUPT",
        "ACP_RUNTIME_MISSING",
        "ACP_CONFIG_INVALID",
        "ACP_REFUSED",
    ];
    for code in adapter_codes {
        assert!(CODES.iter().any(|(listed, _)| *listed == code), "{code}");
    }
    assert_eq!(
        count + adapter_codes.len(),
        CODES.len(),
        "every CODES entry has a variant"
    );
}

#[test]
fn a_recorded_error_reads_back_with_its_code_and_a_cancel_as_a_cancel() {
    let cancelled = Error::recorded("CANCELLED", "aborted");
    assert!(cancelled.is_cancelled());
    assert_eq!(cancelled.to_string(), "cancelled: aborted");
    assert_eq!(Error::recorded("CANCELLED", "").to_string(), "cancelled");
    let refused = Error::recorded("PROVIDER_ERROR", "the provider refused");
    assert_eq!(refused.code(), "PROVIDER_ERROR");
    assert!(!refused.is_cancelled());
    assert!(refused.to_string().contains("the provider refused"));
}
