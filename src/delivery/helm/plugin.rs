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

/// Writes the post-renderer plugin running `binary post-render <file>` —
/// at start and again before every run that names it: helm runs whatever
/// `plugin.yaml` says, as the operator, so what it reads is made here each
/// time, never found. The plugin directory holds nothing else (another
/// plugin of the same name would be as good as ours to helm); no part of
/// the path is followed through a symbolic link; the file is written
/// beside and renamed over, so a link planted in its place is replaced,
/// never written through.
pub fn install_post_renderer(work_dir: &Path, binary: &Path) -> Result<(), String> {
    let plugins = plugins_dir(work_dir);
    let dir = plugins.join(POST_RENDER_PLUGIN);
    for d in [work_dir.join("helm"), plugins.clone(), dir.clone()] {
        real_dir(&d)?;
    }
    only_ours(&plugins)?;
    let wanted = manifest(binary);
    let file = dir.join("plugin.yaml");
    if read_no_follow(&file).as_deref() == Some(wanted.as_bytes()) {
        return Ok(());
    }
    // One name per writer: runs write at once, each its own file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let next = dir.join(format!(".plugin.yaml.{}.{n}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&next)
        .and_then(|mut f| std::io::Write::write_all(&mut f, wanted.as_bytes()))
        .and_then(|()| std::fs::rename(&next, &file));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&next);
        format!("cannot write {}: {e}", file.display())
    })
}

/// `dir` made a directory of its own: a symbolic link (or a file) in its
/// place is removed first.
fn real_dir(dir: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_dir() => return Ok(()),
        Ok(_) => std::fs::remove_file(dir)
            .map_err(|e| format!("cannot remove {} (not a directory): {e}", dir.display()))?,
        Err(_) => {}
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_dir() => Ok(()),
        _ => Err(format!("{} is not a directory of its own", dir.display())),
    }
}

/// Removes every entry of the plugin directory but ours.
fn only_ours(plugins: &Path) -> Result<(), String> {
    let entries = std::fs::read_dir(plugins)
        .map_err(|e| format!("cannot read {}: {e}", plugins.display()))?;
    for entry in entries.flatten() {
        if entry.file_name() == POST_RENDER_PLUGIN {
            continue;
        }
        let path = entry.path();
        let gone = match entry.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        gone.map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
    }
    Ok(())
}

/// The bytes of `file` if it is a regular file (a link is not followed).
fn read_no_follow(file: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)
        .ok()?;
    if !f.metadata().ok()?.file_type().is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ok()?;
    Some(bytes)
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

    #[test]
    fn what_was_planted_in_the_plugin_directory_is_replaced_never_written_through() {
        use std::os::unix::fs::symlink;
        let root = std::env::temp_dir().join(format!("plugin-plant-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (work, outside) = (root.join("work"), root.join("outside"));
        std::fs::create_dir_all(&outside).unwrap();
        let binary = Path::new("/opt/hossted-operator");
        install_post_renderer(&work, binary).unwrap();
        let dir = plugins_dir(&work).join(POST_RENDER_PLUGIN);
        let file = dir.join("plugin.yaml");
        let ours = std::fs::read(&file).unwrap();

        // plugin.yaml a link to a file elsewhere; another plugin beside.
        let victim = outside.join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        std::fs::remove_file(&file).unwrap();
        symlink(&victim, &file).unwrap();
        let other = plugins_dir(&work).join("other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("plugin.yaml"), "name: hossted-post-render\n").unwrap();
        install_post_renderer(&work, binary).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert!(
            std::fs::symlink_metadata(&file)
                .unwrap()
                .file_type()
                .is_file()
        );
        assert_eq!(std::fs::read(&file).unwrap(), ours);
        assert!(!other.exists(), "no other plugin beside ours");

        // The plugin's directory itself a link to a directory elsewhere.
        std::fs::remove_dir_all(&dir).unwrap();
        symlink(&outside, &dir).unwrap();
        install_post_renderer(&work, binary).unwrap();
        assert!(
            !outside.join("plugin.yaml").exists(),
            "nothing written through the link"
        );
        assert!(
            std::fs::symlink_metadata(&dir)
                .unwrap()
                .file_type()
                .is_dir()
        );
        assert_eq!(std::fs::read(&file).unwrap(), ours);

        // A stale plugin (another binary) is rewritten.
        std::fs::write(&file, "runtime: subprocess\n").unwrap();
        install_post_renderer(&work, binary).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), ours);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
