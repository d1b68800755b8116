//! A repository `index.yaml` of the size and shape of Bitnami's, made
//! from a real small one: shared by the scale benchmark and `benches/index.rs`.

/// A Bitnami-shaped `index.yaml` of `entries` entries besides the real
/// one(s) in `real` (the repository's own index).
pub fn generate(real: &str, entries: usize) -> String {
    let mut out = String::with_capacity(entries * 900);
    let versions = 100;
    let (head, tail) = real.split_once("entries:\n").expect("an index");
    out.push_str(head);
    out.push_str("entries:\n");
    for c in 0..entries / versions {
        out.push_str(&format!("  chart-{c:04}:\n"));
        for v in 0..versions {
            out.push_str(&format!(
                "  - annotations:\n      category: Infrastructure\n      licenses: Apache-2.0\n    apiVersion: v2\n    appVersion: {v}.4.2\n    created: \"2026-11-{:02}T10:{:02}:00.000000000Z\"\n    dependencies:\n    - name: common\n      repository: oci://registry-1.docker.io/bitnamicharts\n      tags:\n      - bitnami-common\n      version: 2.x.x\n    description: Chart {c} is a generated entry of the size of a Bitnami chart's, to make the index as large as theirs; nothing here is ever installed.\n    digest: {:064x}\n    home: https://bitnami.com\n    icon: https://dyltqmyl993wv.cloudfront.net/assets/stacks/chart-{c}/img/chart-{c}-stack-220x234.png\n    keywords:\n    - chart-{c}\n    - database\n    maintainers:\n    - name: Broadcom, Inc. All Rights Reserved.\n      url: https://github.com/bitnami/charts\n    name: chart-{c:04}\n    sources:\n    - https://github.com/bitnami/charts/tree/main/bitnami/chart-{c}\n    urls:\n    - https://charts.bitnami.com/bitnami/chart-{c:04}-{v}.0.0.tgz\n    version: {v}.0.0\n",
                1 + v % 28, v % 60, (c * versions + v) as u128 * 0x9e37_79b9_7f4a_7c15
            ));
        }
    }
    out.push_str(tail);
    out
}
