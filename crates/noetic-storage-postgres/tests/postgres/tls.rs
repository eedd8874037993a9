//! PostgreSQL over TLS, for real: a server of the test's own with `ssl=on` and a certificate made at
//! test time (`noetic_test_support::postgres::TlsServer`: a CA, and a server certificate it signs for
//! the host name `localhost` only). `verify-full` connects through a name the certificate holds with
//! that CA, and is refused, with an error naming the TLS failure, on another CA or another name.

#![allow(clippy::unwrap_used)] // a test: a failure is a panic

use std::time::Duration;

use noetic_core::StorageAdapter;
use noetic_core::adapter::durable::{Commit, DurableStore};
use noetic_storage_postgres::{PostgresOptions, PostgresStorage};
use noetic_test_support::postgres::{TestCa, TlsServer, print_skip};

/// Connects to `url`, giving up after 10 s (a refused handshake is not retried for longer).
async fn connect(url: &str) -> noetic_core::Result<PostgresStorage> {
    PostgresStorage::connect_with(
        url,
        PostgresOptions::default().acquire_timeout(Duration::from_secs(10)),
    )
    .await
}

/// Whether the store's connection is encrypted, as the server sees it.
async fn encrypted(store: &PostgresStorage) -> bool {
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn verify_full_with_the_servers_ca_connects_over_tls_and_the_store_works() {
    let Some(server) = TlsServer::start().await else {
        print_skip("verify_full_with_the_servers_ca_connects_over_tls_and_the_store_works");
        return;
    };
    let ca = server.ca_file();
    // `verify-ca` checks the chain only, so an address the certificate does not name is fine.
    for url in [
        server.url("localhost", "verify-full", Some(&ca)),
        server.url("127.0.0.1", "verify-ca", Some(&ca)),
    ] {
        let store = connect(&url)
            .await
            .unwrap_or_else(|error| panic!("{url}: {error}"));
        assert!(encrypted(&store).await, "{url}: the connection is TLS");
        store.set("k", url.as_bytes().to_vec()).await.unwrap();
        store
            .commit(Commit::new().put("r", url.as_str()))
            .await
            .unwrap();
        assert_eq!(
            store.get("k").await.unwrap(),
            Some(url.clone().into_bytes())
        );
        assert_eq!(store.record("r").await.unwrap(), Some(url.into_bytes()));
    }
    // `require` encrypts without verifying anything.
    let store = connect(&server.url("127.0.0.1", "require", None))
        .await
        .unwrap();
    assert!(encrypted(&store).await);
}

#[tokio::test]
async fn verify_full_refuses_another_ca_or_another_host_name_with_an_error_naming_the_tls_failure()
{
    let Some(server) = TlsServer::start().await else {
        print_skip(
            "verify_full_refuses_another_ca_or_another_host_name_with_an_error_naming_the_tls_failure",
        );
        return;
    };
    let other = server.write_file("other-ca.pem", TestCa::new("another CA").pem());
    let ca = server.ca_file();
    for (url, failure) in [
        // Signed by a CA it was not told to trust.
        (
            server.url("localhost", "verify-full", Some(&other)),
            "UnknownIssuer",
        ),
        // No private CA at all: only the public roots, which did not sign it.
        (
            server.url("localhost", "verify-full", None),
            "UnknownIssuer",
        ),
        // The right CA, but the certificate names `localhost`, not the address connected to.
        (
            server.url("127.0.0.1", "verify-full", Some(&ca)),
            "certificate not valid for name \"127.0.0.1\"",
        ),
    ] {
        let error = connect(&url).await.unwrap_err();
        assert_eq!(error.code(), "STORAGE_ERROR", "{url}: {error}");
        let text = format!(
            "{error} / {}",
            std::error::Error::source(&error)
                .map(ToString::to_string)
                .unwrap_or_default()
        );
        assert!(
            text.contains(&format!("invalid peer certificate: {failure}")),
            "{url}: the error names the TLS failure ({failure}): {text}"
        );
        assert!(
            text.contains(&format!("127.0.0.1:{}", server.port()))
                || text.contains(&format!("localhost:{}", server.port())),
            "{url}: the error names the server: {text}"
        );
    }
}
