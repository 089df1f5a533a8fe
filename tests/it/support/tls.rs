//! Certificates made at test time with the `openssl` command line, and
//! `redis-server` processes with a TLS port beside their plain one (the
//! plain one is for inspecting them).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::server::{Nodes, Server};

/// A private CA, a server certificate it signed (for `localhost`,
/// `redis.test` and 127.0.0.1), a client certificate it signed, and an
/// unrelated CA.
pub struct Certs {
    pub dir: PathBuf,
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (install the openssl package)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A new P-256 key in `name`.
fn ec_key(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            name,
        ],
    );
}

impl Certs {
    pub fn make() -> Certs {
        let dir = std::env::temp_dir().join(format!(
            "redlock-sync-certs-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let d = &dir;
        for ca in ["ca", "other-ca"] {
            ec_key(d, &format!("{ca}.key"));
            openssl(
                d,
                &[
                    "req",
                    "-x509",
                    "-new",
                    "-key",
                    &format!("{ca}.key"),
                    "-days",
                    "2",
                    "-subj",
                    &format!("/CN=redlock-sync test {ca}"),
                    "-out",
                    &format!("{ca}.pem"),
                ],
            );
        }
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=DNS:localhost,DNS:redis.test,IP:127.0.0.1\n\
             basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        std::fs::write(
            d.join("client.ext"),
            "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
        )
        .unwrap();
        for (who, cn) in [("server", "redis.test"), ("client", "locker")] {
            ec_key(d, &format!("{who}.ec"));
            // PKCS#8, as most tools write keys today.
            openssl(
                d,
                &[
                    "pkcs8",
                    "-topk8",
                    "-nocrypt",
                    "-in",
                    &format!("{who}.ec"),
                    "-out",
                    &format!("{who}.key"),
                ],
            );
            openssl(
                d,
                &[
                    "req",
                    "-new",
                    "-key",
                    &format!("{who}.key"),
                    "-subj",
                    &format!("/CN={cn}"),
                    "-out",
                    &format!("{who}.csr"),
                ],
            );
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{who}.csr"),
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-extfile",
                    &format!("{who}.ext"),
                    "-out",
                    &format!("{who}.pem"),
                ],
            );
        }
        Certs { dir }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(name)).unwrap()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The arguments that open a TLS port with the test certificates;
/// `auth_clients` is `tls-auth-clients` (`yes`, `no`, `optional`).
pub fn tls_args(certs: &Certs, port: u16, auth_clients: &str) -> Vec<String> {
    [
        "--tls-port",
        &port.to_string(),
        "--tls-cert-file",
        &certs.path("server.pem"),
        "--tls-key-file",
        &certs.path("server.key"),
        "--tls-ca-cert-file",
        &certs.path("ca.pem"),
        "--tls-auth-clients",
        auth_clients,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A server with a TLS port (`tls_port`) beside its plain one; `None`,
/// saying why, when this `redis-server` was built without TLS.
pub fn tls_server(certs: &Certs, client_certs: bool) -> Option<(Server, u16)> {
    let port = super::server::free_port().unwrap();
    let args = tls_args(certs, port, if client_certs { "yes" } else { "no" });
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match Server::start_with(&args) {
        Ok(server) => Some((server, port)),
        Err(e) => {
            eprintln!(
                "{}",
                super::server::skip(format!(
                    "skipped: {:?} cannot serve TLS ({e}); TLS tests need a redis-server built with TLS",
                    super::server::server_version()
                ))
            );
            None
        }
    }
}

/// A Redis Cluster whose servers serve TLS beside their plain port, the
/// cluster bus included (`tls-cluster yes`, each server authenticating
/// to the others with the client certificate), so that they announce
/// their TLS ports to TLS clients: in `CLUSTER SLOTS` and in redirects.
/// Returns the TLS ports in the order of `servers()`; `None`, saying why,
/// when this `redis-server` cannot (no TLS, or no Redis Cluster).
pub fn tls_redis_cluster(
    certs: &Certs,
    masters: usize,
    replicas: usize,
) -> Option<(super::redis_cluster::RedisCluster, Vec<u16>)> {
    if let Some(why) = super::redis_cluster::unsupported() {
        eprintln!("{why}");
        return None;
    }
    // Says why and gives up when this server has no TLS.
    tls_server(certs, false)?;
    let mut ports = Vec::new();
    let mut cluster = super::redis_cluster::RedisCluster::start_with(masters, replicas, || {
        let port = super::server::free_port().unwrap();
        ports.push(port);
        let mut args = tls_args(certs, port, "optional");
        args.extend(
            [
                "--tls-cluster",
                "yes",
                "--tls-client-cert-file",
                &certs.path("client.pem"),
                "--tls-client-key-file",
                &certs.path("client.key"),
            ]
            .map(str::to_owned),
        );
        args
    })
    .unwrap();
    cluster.tls_ports = ports.clone();
    Some((cluster, ports))
}

/// `n` TLS servers; their `rediss://127.0.0.1:PORT` URLs.
pub fn tls_cluster(certs: &Certs, n: usize, client_certs: bool) -> Option<(Nodes, Vec<u16>)> {
    let mut servers = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..n {
        let (server, port) = tls_server(certs, client_certs)?;
        servers.push(server);
        ports.push(port);
    }
    Some((Nodes { servers }, ports))
}

pub fn tls_url(port: u16) -> String {
    format!("rediss://127.0.0.1:{port}")
}
