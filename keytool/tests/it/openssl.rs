//! Interoperation with OpenSSL: it verifies what keytool signs and reads the keys keytool
//! exports, and keytool imports and signs with keys OpenSSL generated.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::{Kt, s};

/// `openssl`, installed with apt when missing (CI runs as root).
fn openssl() -> &'static str {
    let have = || {
        Command::new("openssl")
            .arg("version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if !have() {
        let installed = Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "openssl"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !installed {
            let _ = Command::new("apt-get").arg("update").status();
            let _ = Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends", "openssl"])
                .status();
        }
        assert!(
            have(),
            "the interop test needs the openssl command, and `apt-get install -y openssl` did not provide it (not root, or no package access)"
        );
    }
    "openssl"
}

fn run_openssl(dir: &Path, args: &[&str]) -> Output {
    Command::new(openssl())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl")
}

fn openssl_verify(dir: &Path, scheme: &str, pubkey: &str, msg: &str, sig: &str) -> Output {
    match scheme {
        "ed25519" => run_openssl(
            dir,
            &[
                "pkeyutl", "-verify", "-pubin", "-inkey", pubkey, "-rawin", "-in", msg, "-sigfile",
                sig,
            ],
        ),
        _ => run_openssl(
            dir,
            &["dgst", "-sha256", "-verify", pubkey, "-signature", sig, msg],
        ),
    }
}

#[test]
fn openssl_verifies_minted_capabilities_ed25519_and_p256() {
    let kt = Kt::new();
    let dir = kt.dir.path();
    let ctx = s(&kt.json(&["ctx", "new"])["id"]);
    for scheme in ["ed25519", "p256"] {
        let (sk, vk) = kt.keygen(&["--scheme", scheme]);
        let obj = s(&kt.json(&["obj", "new", "--kuid", &vk])["id"]);
        let cap = format!("{scheme}.cap");
        let (msg, sig, pubkey) = (
            format!("{scheme}.msg"),
            format!("{scheme}.sig"),
            format!("{scheme}.pub.pem"),
        );
        kt.ok(&[
            "mint",
            "--key",
            &sk,
            "--target",
            &obj,
            "--accessor",
            &ctx,
            "--prots",
            "rw-",
            "--out",
            &cap,
        ]);
        kt.ok(&["export", &vk, "--out", &pubkey]);
        kt.ok(&[
            "inspect",
            &cap,
            "--signed-message-out",
            &msg,
            "--signature-out",
            &sig,
        ]);
        assert_eq!(std::fs::read(dir.join(&msg)).unwrap().len(), 32);
        let o = openssl_verify(dir, scheme, &pubkey, &msg, &sig);
        assert!(
            o.status.success(),
            "openssl rejects the {scheme} capability: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        // And it rejects another message.
        let mut other = std::fs::read(dir.join(&msg)).unwrap();
        other[0] ^= 1;
        std::fs::write(dir.join("other.msg"), &other).unwrap();
        assert!(
            !openssl_verify(dir, scheme, &pubkey, "other.msg", &sig)
                .status
                .success()
        );

        // The secret key exports as PKCS#8 that OpenSSL reads, with the same public key.
        let key_pem = format!("{scheme}.key.pem");
        kt.ok(&["export", &sk, "--secret", "--out", &key_pem]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(&key_pem))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let o = run_openssl(dir, &["pkey", "-in", &key_pem, "-pubout"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(
            String::from_utf8(o.stdout).unwrap(),
            std::fs::read_to_string(dir.join(&pubkey)).unwrap()
        );
        // A signing-key id exports its public key too (stdout without --out).
        assert_eq!(
            kt.ok(&["export", &sk]).trim_end(),
            std::fs::read_to_string(dir.join(&pubkey))
                .unwrap()
                .trim_end()
        );
    }
}

#[test]
fn keys_generated_by_openssl_import_and_sign() {
    let kt = Kt::new();
    let dir = kt.dir.path();
    let ctx = s(&kt.json(&["ctx", "new"])["id"]);
    kt.write("pass", b"s3cret\n");
    for (scheme, genargs) in [
        (
            "ed25519",
            vec!["genpkey", "-algorithm", "ed25519", "-out", "ed.key"],
        ),
        (
            "p256",
            vec![
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                "p.key",
            ],
        ),
    ] {
        let key = genargs.last().unwrap().to_string();
        let o = run_openssl(dir, &genargs);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let imported = kt.json(&["import", &key, "--passphrase-file", "pass"]);
        assert_eq!(imported["scheme"], scheme);
        assert_eq!(imported["protected"], true);
        let (sk, vk) = (s(&imported["signing"]), s(&imported["verifying"]));
        let obj = s(&kt.json(&["obj", "new", "--kuid", &vk])["id"]);
        let cap = format!("{scheme}.cap");
        kt.ok(&[
            "mint",
            "--key",
            &sk,
            "--target",
            &obj,
            "--accessor",
            &ctx,
            "--prots",
            "r--",
            "--out",
            &cap,
            "--passphrase-file",
            "pass",
        ]);
        assert_eq!(kt.json(&["verify", &cap])["valid"], true);
        // OpenSSL's own public key verifies it.
        let pubkey = format!("{scheme}.openssl.pub");
        let o = run_openssl(dir, &["pkey", "-in", &key, "-pubout", "-out", &pubkey]);
        assert!(o.status.success());
        kt.ok(&[
            "inspect",
            &cap,
            "--signed-message-out",
            "m",
            "--signature-out",
            "s",
            "--force",
        ]);
        let o = openssl_verify(dir, scheme, &pubkey, "m", "s");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // A public key alone imports as a verifying-key object others can name as kuid.
        let id = if scheme == "ed25519" { "ed" } else { "b256" };
        let v = kt.json(&["import", &pubkey, "--id", id]);
        let vid = s(&v["verifying"]);
        assert_eq!(kt.json(&["inspect", &vid])["type"], "verifying_key");
        let o2 = s(&kt.json(&["obj", "new", "--kuid", &vid])["id"]);
        kt.ok(&[
            "mint",
            "--key",
            &sk,
            "--target",
            &o2,
            "--accessor",
            &ctx,
            "--prots",
            "r--",
            "--out",
            &format!("{scheme}2.cap"),
            "--passphrase-file",
            "pass",
            "--unchecked",
        ]);
        assert_eq!(
            kt.json(&["verify", &format!("{scheme}2.cap")])["valid"],
            true
        );
    }
}
