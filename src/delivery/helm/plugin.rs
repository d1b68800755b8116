//! helm 4 runs a post-renderer only as a plugin (type `postrenderer/v1`):
//! the operator's own `post-render` subcommand is packaged as one, written
//! at start into the operator's helm plugin directory in its work
//! directory — nothing fetched, nothing installed by helm.

use std::path::{Path, PathBuf};

use super::args::{POST_RENDER_PLUGIN, POST_RENDER_SUBCOMMAND};

/// The plugin directory helm is given (`HELM_PLUGINS`).
pub fn plugins_dir(work_dir: &Path) -> PathBuf {
    work_dir.join("helm/plugins")
}

/// Writes the post-renderer plugin running `binary post-render <file>`.
pub fn install_post_renderer(work_dir: &Path, binary: &Path) -> Result<(), String> {
    let dir = plugins_dir(work_dir).join(POST_RENDER_PLUGIN);
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot make helm's plugin directory {}: {e}", dir.display()))?;
    let file = dir.join("plugin.yaml");
    std::fs::write(&file, manifest(binary))
        .map_err(|e| format!("cannot write {}: {e}", file.display()))
}

/// The plugin's `plugin.yaml` (JSON strings are YAML strings: the path is
/// quoted whatever it holds).
fn manifest(binary: &Path) -> String {
    let quoted = |s: &str| serde_json::Value::from(s).to_string();
    format!(
        "apiVersion: v1\nname: {name}\ntype: postrenderer/v1\nversion: {version}\nruntime: subprocess\nruntimeConfig:\n  platformCommand:\n    - command: {command}\n      args: [{subcommand}]\n",
        name = POST_RENDER_PLUGIN,
        version = env!("CARGO_PKG_VERSION"),
        command = quoted(&binary.display().to_string()),
        subcommand = quoted(POST_RENDER_SUBCOMMAND),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_runs_the_subcommand_of_the_binary_given() {
        let work = std::env::temp_dir().join(format!("plugin-test-{}", std::process::id()));
        install_post_renderer(&work, Path::new("/opt/my \"op\"/hossted-operator")).unwrap();
        let text = std::fs::read_to_string(
            plugins_dir(&work)
                .join(POST_RENDER_PLUGIN)
                .join("plugin.yaml"),
        )
        .unwrap();
        std::fs::remove_dir_all(&work).unwrap();
        let yaml: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(yaml["type"], "postrenderer/v1");
        assert_eq!(yaml["name"], POST_RENDER_PLUGIN);
        let command = &yaml["runtimeConfig"]["platformCommand"][0];
        assert_eq!(command["command"], "/opt/my \"op\"/hossted-operator");
        assert_eq!(command["args"], serde_json::json!([POST_RENDER_SUBCOMMAND]));
    }
}
