//! The throwaway PostgreSQL cluster tests and benches run against (feature `test-suite`):
//! `scripts/start-test-postgres.sh` starts one and writes its URL; tests read it from
//! [`URL_VAR`] and give each test a database of its own.
//!
//! Without the variable a test skips loudly, unless [`REQUIRE_VAR`] is `1` (as in CI), which
//! makes the missing cluster a failure. Helpers panic on failure, as test code does.

#![allow(
    clippy::unwrap_used,
    reason = "this module is test code: a failed step must fail the test with its error"
)]

use tokio_postgres::{Client, Config, NoTls};

/// The variable holding the test cluster's URL (a superuser on its `postgres` database).
pub const URL_VAR: &str = "TROUPE_TEST_POSTGRES_URL";
/// Set to `1` to make a missing cluster a failure instead of a skip.
pub const REQUIRE_VAR: &str = "TROUPE_REQUIRE_POSTGRES";

/// The test cluster's URL. Without one: a loud skip naming `what` and `None`, or a panic when
/// [`REQUIRE_VAR`] is `1`.
pub fn cluster_url(what: &str) -> Option<String> {
    if let Ok(url) = std::env::var(URL_VAR)
        && !url.trim().is_empty()
    {
        return Some(url.trim().to_string());
    }
    assert!(
        std::env::var(REQUIRE_VAR).as_deref() != Ok("1"),
        "{REQUIRE_VAR}=1 but {URL_VAR} is not set: start a cluster with \
         scripts/start-test-postgres.sh and export the URL it writes"
    );
    eprintln!(
        "\n*** SKIPPED: {what} (no {URL_VAR}). Run scripts/start-test-postgres.sh and export the \
         URL it writes to run it. ***\n"
    );
    None
}

/// A client on `config`, its connection driven by a spawned task.
pub async fn connect(config: &Config) -> Client {
    let (client, connection) = config.connect(NoTls).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// An empty database made for one test on the cluster.
#[derive(Debug, Clone)]
pub struct TestDatabase {
    /// Its name: the prefix given and a fresh uuid.
    pub name: String,
    /// Connection settings for it.
    pub config: Config,
    /// A URL for it, for configuration files and child processes.
    pub url: String,
}

/// Makes an empty database named `{prefix}_{uuid}` on the cluster at `cluster_url`.
pub async fn fresh_database(cluster_url: &str, prefix: &str) -> TestDatabase {
    let cluster: Config = cluster_url.parse().unwrap();
    let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    connect(&cluster)
        .await
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let mut config = cluster;
    config.dbname(&name);
    TestDatabase {
        url: with_dbname(cluster_url, &name),
        name,
        config,
    }
}

/// `url` with its database replaced by `dbname`, query parameters kept.
pub fn with_dbname(url: &str, dbname: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_part = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{host_part}/{dbname}?{q}"),
        None => format!("{host_part}/{dbname}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_is_replaced_and_parameters_kept() {
        assert_eq!(
            with_dbname("postgres://u@h:5/postgres?sslmode=disable", "t1"),
            "postgres://u@h:5/t1?sslmode=disable"
        );
        assert_eq!(with_dbname("postgres://u@h:5", "t1"), "postgres://u@h:5/t1");
    }
}
