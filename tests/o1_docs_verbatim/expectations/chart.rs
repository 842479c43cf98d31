//! charts/lineage/README.md: the rendered lineage.toml, loaded as voter 0 would (the other
//! blocks need a Kubernetes cluster: skipped by the page).

use super::Expect::{self, Exits, Writes};

pub fn expectations() -> Vec<(&'static str, Expect)> {
    vec![
        (
            r#"helm template lineage charts/lineage --show-only templates/configmap.yaml \
  | awk '/^  lineage.toml: \|/ { on = 1; next } on { sub(/^    /, ""); print }' > /tmp/lineage.toml"#,
            Writes {
                path: "/tmp/lineage.toml",
                line: "[registry]",
            },
        ),
        (
            r#"LINEAGE_NODE__ID=lineage-voter-0 LINEAGE_REGISTRY__RAFT_ID=1 LINEAGE_REGISTRY__BOOTSTRAP=true \
  lineage config show --config /tmp/lineage.toml"#,
            Exits(
                0,
                "node.id*\"lineage-voter-0\"*`LINEAGE_` environment variable",
            ),
        ),
    ]
}
