//! The deployment files under deploy/ use only flags and environment
//! variables that `monolock serve -h` lists, and the Kubernetes manifests
//! parse and keep the properties docs/ha.md relies on.

use std::{collections::BTreeSet, path::Path, process::Command};

use serde_json::Value;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy");

fn serve_help() -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_monolock"))
        .args(["serve", "-h"])
        .output()
        .expect("run monolock serve -h");
    assert!(output.status.success());
    String::from_utf8(output.stdout).expect("utf-8 help")
}

/// Every `MONOLOCK_*` name and `--flag` in `text` (a prefix such as
/// `MONOLOCK_TLS_*` in a comment names a family, not a variable).
fn names_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')) {
        if (word.starts_with("MONOLOCK_") && !word.ends_with('_'))
            || (word.starts_with("--") && word.len() > 2)
        {
            names.insert(word.to_owned());
        }
    }
    names
}

fn kubernetes() -> Value {
    let text = std::fs::read_to_string(Path::new(DEPLOY).join("kubernetes/monolock.json"))
        .expect("read the manifests");
    serde_json::from_str(&text).expect("the manifests parse")
}

fn item<'a>(list: &'a Value, kind: &str) -> &'a Value {
    list["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["kind"] == kind))
        .unwrap_or_else(|| panic!("no {kind}"))
}

#[test]
fn every_flag_and_variable_of_the_deployment_files_exists() {
    let help = serve_help();
    let known = names_in(&help);
    let manifests = kubernetes();
    let deployment = item(&manifests, "Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mut used = BTreeSet::new();
    for env in container["env"].as_array().expect("env") {
        used.insert(env["name"].as_str().expect("name").to_owned());
    }
    for arg in container["args"].as_array().expect("args") {
        used.extend(names_in(arg.as_str().expect("arg")));
    }
    for file in ["Dockerfile", "monolock.service"] {
        let text = std::fs::read_to_string(Path::new(DEPLOY).join(file)).expect(file);
        used.extend(
            names_in(&text)
                .into_iter()
                .filter(|n| n.starts_with("MONOLOCK_")),
        );
    }
    assert!(used.len() >= 10, "{used:?}");
    let unknown: Vec<_> = used.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "not in `monolock serve -h`: {unknown:?}"
    );
}

#[test]
fn the_deployment_is_one_replica_recreated_with_probes_on_the_ops_port() {
    let manifests = kubernetes();
    let deployment = item(&manifests, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    let pod = &deployment["spec"]["template"]["spec"];
    // SIGTERM: ERROR 0x01 to every session (writes bounded by the 5 s
    // io-timeout), then the ops endpoint stays up 2 s.
    assert!(
        pod["terminationGracePeriodSeconds"]
            .as_u64()
            .expect("grace period")
            >= 10
    );
    let container = &pod["containers"][0];
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], "ops");
    let admin = container["env"]
        .as_array()
        .and_then(|env| {
            env.iter()
                .find(|e| e["name"] == "MONOLOCK_ADMIN_LISTEN_ADDRESS")
        })
        .expect("admin address");
    assert!(
        admin["value"]
            .as_str()
            .is_some_and(|v| v.starts_with("127.0.0.1:"))
    );
    // The NetworkPolicy admits the protocol and ops ports only.
    let policy = item(&manifests, "NetworkPolicy");
    let ports: BTreeSet<u64> = policy["spec"]["ingress"]
        .as_array()
        .expect("ingress")
        .iter()
        .flat_map(|rule| rule["ports"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["port"].as_u64())
        .collect();
    assert_eq!(ports, BTreeSet::from([7070, 9090]));
    item(&manifests, "Service");
    item(&manifests, "ConfigMap");
    item(&manifests, "Secret");
}
