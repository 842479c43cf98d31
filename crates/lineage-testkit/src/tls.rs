//! Certificates for TLS tests, made by the `openssl` CLI (as an operator would make a test
//! PKI): a CA and a server and a client certificate it signed.

use std::path::Path;
use std::process::Command;

/// Runs openssl, panicking with its output when it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the TLS test needs the openssl CLI on PATH");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1, a client certificate and a peer certificate (for
/// 127.0.0.1, both server and client: as the registry voters' direct links use), made with
/// openssl in `dir`: `<name>.pem` and `<name>-key.pem` (the CA), `<name>-server.pem` and
/// `<name>-server-key.pem`, `<name>-client.pem` and `<name>-client-key.pem`, `<name>-peer.pem`
/// and `<name>-peer-key.pem`.
pub fn make_ca(dir: &Path, name: &str) {
    let ca_key = format!("{name}-key.pem");
    let ca = format!("{name}.pem");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &ca_key,
            "-out",
            &ca,
            "-days",
            "2",
            "-subj",
            "/CN=lineage test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    for (leaf, cn, ext) in [
        (
            "server",
            "127.0.0.1",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        ),
        ("client", "node-4", "extendedKeyUsage=clientAuth\n"),
        (
            "peer",
            "127.0.0.1",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        ),
    ] {
        let key = format!("{name}-{leaf}-key.pem");
        let csr = format!("{name}-{leaf}.csr");
        let cert = format!("{name}-{leaf}.pem");
        let extfile = format!("{name}-{leaf}.ext");
        std::fs::write(dir.join(&extfile), ext).unwrap();
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={cn}"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-out",
                &cert,
                "-days",
                "2",
                "-extfile",
                &extfile,
            ],
        );
    }
}
