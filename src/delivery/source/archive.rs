//! The checks a fetched chart archive (`.tgz`) passes before it is cached
//! and handed to helm.
//!
//! A repository or registry chooses the archive's bytes. Helm unpacks it in
//! memory; a gzip bomb, or ten million empty entries, would cost the
//! operator's pod that memory. And an entry that is absolute, climbs with
//! `..` or is a link has no place in a chart (`helm package` writes none).
//! The archive is read once as a stream, counting what it unpacks to, and
//! stopped at the first bound passed — never unpacked to disk.

use std::cell::Cell;
use std::io::Read;
use std::path::Component;

/// The largest archive received.
pub const MAX_PACKED: u64 = 16 * 1024 * 1024;
/// The most an archive may unpack to.
pub const MAX_UNPACKED: u64 = 64 * 1024 * 1024;
/// The most entries an archive may hold.
pub const MAX_ENTRIES: usize = 10_000;

/// `Err` says which bound or rule the archive breaks (and which entry);
/// no content of the archive is in it beyond that entry's path, cut short.
pub fn check(bytes: &[u8]) -> Result<(), String> {
    check_within(bytes, &Cell::new(MAX_UNPACKED), 0)
}

/// Subchart archives (`charts/*.tgz`) read inside an archive, at most this
/// deep; they share the one unpacked bound.
const MAX_NESTING: usize = 4;

/// [`check`] of an archive found `depth` archives deep, counting what it
/// unpacks to against `left` (shared with the archives around it). Each
/// `values.schema.json`, subcharts' too, passes [`super::schema::check`].
fn check_within(bytes: &[u8], left: &Cell<u64>, depth: usize) -> Result<(), String> {
    if bytes.len() as u64 > MAX_PACKED {
        return Err(format!(
            "the chart archive is {} bytes, more than {MAX_PACKED}",
            bytes.len()
        ));
    }
    // Counts every byte the decompressor gives, headers and padding too,
    // and stops at the bound whatever the headers declare. Every gzip
    // member, as Go's reader (helm's) reads them: entries hidden in a
    // second member are checked too.
    let unpacked = Bounded {
        inner: flate2::read::MultiGzDecoder::new(bytes),
        left,
    };
    let mut archive = tar::Archive::new(unpacked);
    let entries = archive
        .entries()
        .map_err(|e| format!("the chart archive is not a gzipped tar: {e}"))?;
    for (n, entry) in entries.enumerate() {
        if n >= MAX_ENTRIES {
            return Err(format!(
                "the chart archive has more than {MAX_ENTRIES} entries"
            ));
        }
        let mut entry = entry.map_err(|e| unreadable(&e))?;
        let path = entry.path().map_err(|e| unreadable(&e))?.into_owned();
        let shown: String = path.display().to_string().chars().take(120).collect();
        if path.is_absolute()
            || path.components().any(|c| {
                matches!(
                    c,
                    Component::ParentDir | Component::RootDir | Component::Prefix(_)
                )
            })
        {
            return Err(format!(
                "the chart archive's entry {shown:?} leaves the chart"
            ));
        }
        let kind = entry.header().entry_type();
        if kind.is_symlink() || kind.is_hard_link() {
            return Err(format!("the chart archive's entry {shown:?} is a link"));
        }
        let name = path.to_string_lossy().into_owned();
        let schema = super::schema::is_schema(&name);
        let subchart = name.ends_with(".tgz") && name.contains("/charts/");
        if schema || subchart {
            let mut content = Vec::new();
            entry
                .read_to_end(&mut content)
                .map_err(|e| unreadable(&e))?;
            if schema {
                super::schema::check(&name, &content)?;
            } else if depth < MAX_NESTING {
                // Helm reads a subchart's archive as a chart of its own.
                check_within(&content, left, depth + 1)
                    .map_err(|e| format!("subchart {shown}: {e}"))?;
            } else {
                return Err(format!(
                    "the chart archive's subchart {shown:?} is nested more than {MAX_NESTING} deep"
                ));
            }
            continue;
        }
        // Read through: the count above covers what it really holds.
        std::io::copy(&mut entry, &mut std::io::sink()).map_err(|e| unreadable(&e))?;
    }
    // Trailing data past the tar's end still counts towards the bound.
    std::io::copy(&mut archive.into_inner(), &mut std::io::sink()).map_err(|e| unreadable(&e))?;
    Ok(())
}

/// The largest Chart.yaml read for its name.
const MAX_CHART_YAML: u64 = 1024 * 1024;

/// The `name` of the chart archive's own `Chart.yaml` (`<dir>/Chart.yaml`,
/// not a subchart's), within the bounds [`check`] holds an archive to.
pub fn chart_name(bytes: &[u8]) -> Result<String, String> {
    if bytes.len() as u64 > MAX_PACKED {
        return Err(format!("the chart archive is more than {MAX_PACKED} bytes"));
    }
    let left = Cell::new(MAX_UNPACKED);
    let unpacked = Bounded {
        inner: flate2::read::MultiGzDecoder::new(bytes),
        left: &left,
    };
    let mut archive = tar::Archive::new(unpacked);
    let entries = archive
        .entries()
        .map_err(|e| format!("the chart archive is not a gzipped tar: {e}"))?;
    let mut found = None;
    for (n, entry) in entries.enumerate() {
        if n >= MAX_ENTRIES {
            return Err(format!(
                "the chart archive has more than {MAX_ENTRIES} entries"
            ));
        }
        let entry = entry.map_err(|e| unreadable(&e))?;
        let path = entry.path().map_err(|e| unreadable(&e))?.into_owned();
        let parts: Vec<_> = path.components().collect();
        let own = parts.len() == 2
            && matches!(parts[0], Component::Normal(_))
            && parts[1].as_os_str() == "Chart.yaml";
        if !own {
            continue;
        }
        // Helm keeps the last of two: which one is the chart's is not
        // for the operator to guess.
        if found.is_some() {
            return Err("the chart archive has more than one Chart.yaml at its top".into());
        }
        let mut text = String::new();
        entry
            .take(MAX_CHART_YAML + 1)
            .read_to_string(&mut text)
            .map_err(|e| unreadable(&e))?;
        if text.len() as u64 > MAX_CHART_YAML {
            return Err(format!(
                "its Chart.yaml is more than {MAX_CHART_YAML} bytes"
            ));
        }
        found = Some(name_in_chart_yaml(&text)?);
    }
    found.ok_or_else(|| "the chart archive has no Chart.yaml".into())
}

/// `name` of a Chart.yaml's text.
pub fn name_in_chart_yaml(text: &str) -> Result<String, String> {
    crate::lean::yaml::check(text).map_err(|e| format!("Chart.yaml refused: {e}"))?;
    serde_yaml_ng::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("name")?.as_str().map(String::from))
        .filter(|n| !n.is_empty())
        .ok_or_else(|| "Chart.yaml names no chart".to_string())
}

fn unreadable(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::FileTooLarge {
        return format!("the chart archive unpacks to more than {MAX_UNPACKED} bytes");
    }
    format!("the chart archive cannot be read: {}", e.kind())
}

/// A reader that fails with `FileTooLarge` past `left` bytes (shared by
/// an archive and the subchart archives read inside it).
struct Bounded<'a, R> {
    inner: R,
    left: &'a Cell<u64>,
}

impl<R: Read> Read for Bounded<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let left = self
            .left
            .get()
            .checked_sub(n as u64)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::FileTooLarge))?;
        self.left.set(left);
        Ok(n)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;

    /// A `.tgz` of `entries` (path, content, link target).
    pub(crate) fn tgz(entries: &[(&str, &[u8], Option<&str>)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
        for (path, content, link) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_mode(0o644);
            match link {
                Some(target) => {
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_size(0);
                    builder.append_link(&mut header, path, target).unwrap();
                }
                None => {
                    header.set_size(content.len() as u64);
                    // Bypasses the builder's own path checks: hostile
                    // archives are made by hand.
                    let name = header.as_old_mut();
                    name.name[..path.len()].copy_from_slice(path.as_bytes());
                    header.set_cksum();
                    builder.append(&header, *content).unwrap();
                }
            }
        }
        builder.into_inner().unwrap().finish().unwrap()
    }

    #[test]
    fn a_schema_that_names_another_document_refuses_the_archive_subcharts_too() {
        let remote = br#"{"properties": {"a": {"$ref": "http://127.0.0.1:9/x"}}}"#;
        let local =
            br##"{"definitions": {"p": {}}, "properties": {"a": {"$ref": "#/definitions/p"}}}"##;
        let chart = |schema: &[u8]| {
            tgz(&[
                ("web/Chart.yaml", b"name: web\nversion: 1.0.0\n", None),
                ("web/values.schema.json", schema, None),
            ])
        };
        assert_eq!(check(&chart(local)), Ok(()));
        let e = check(&chart(remote)).unwrap_err();
        assert!(e.contains("web/values.schema.json: $ref"), "{e}");
        // The same schema in a subchart archive, and in a subchart's
        // directory.
        let sub = tgz(&[("sub/values.schema.json", remote, None)]);
        let outer = tgz(&[
            ("web/Chart.yaml", b"name: web\nversion: 1.0.0\n", None),
            ("web/charts/sub-1.0.0.tgz", &sub, None),
        ]);
        let e = check(&outer).unwrap_err();
        assert!(e.contains("subchart") && e.contains("$ref"), "{e}");
        let dir = tgz(&[("web/charts/sub/values.schema.json", remote, None)]);
        assert!(check(&dir).unwrap_err().contains("$ref"));
    }

    /// `tgz(entries)`'s tar without its end-of-archive blocks, gzipped:
    /// a first member that the next one continues.
    fn open_member(entries: &[(&str, &[u8], Option<&str>)]) -> Vec<u8> {
        use std::io::{Read, Write};
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(&tgz(entries)[..])
            .read_to_end(&mut tar)
            .unwrap();
        while tar.ends_with(&[0u8; 512]) {
            tar.truncate(tar.len() - 512);
        }
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(&tar).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn an_entry_in_a_second_gzip_member_is_checked_as_helm_reads_it() {
        let mut archive = open_member(&[("web/Chart.yaml", b"name: web\n", None)]);
        archive.extend(tgz(&[("web/templates/x", b"", Some("/etc/passwd"))]));
        let e = check(&archive).unwrap_err();
        assert!(e.contains("is a link"), "{e}");
    }

    #[test]
    fn the_charts_own_name_is_read_not_a_subcharts() {
        let chart = tgz(&[
            ("web/charts/db/Chart.yaml", b"name: db\n", None),
            (
                "web/Chart.yaml",
                b"name: web-renamed\nversion: 1.0.0\n",
                None,
            ),
        ]);
        assert_eq!(chart_name(&chart).as_deref(), Ok("web-renamed"));
        let none = tgz(&[("web/values.yaml", b"a: 1\n", None)]);
        assert!(chart_name(&none).is_err());
        let nameless = tgz(&[("web/Chart.yaml", b"version: 1.0.0\n", None)]);
        assert!(chart_name(&nameless).is_err());
        assert!(chart_name(b"not gzip").is_err());
        let two = tgz(&[
            ("web/Chart.yaml", b"name: web\n", None),
            ("other/Chart.yaml", b"name: other\n", None),
        ]);
        assert!(chart_name(&two).is_err(), "two charts in one archive");
    }

    #[test]
    fn a_chart_passes() {
        let chart = tgz(&[
            ("web/Chart.yaml", b"name: web\nversion: 1.0.0\n", None),
            ("web/templates/cm.yaml", b"kind: ConfigMap\n", None),
        ]);
        assert_eq!(check(&chart), Ok(()));
    }

    #[test]
    fn entries_that_leave_the_chart_or_link_are_refused() {
        for (bad, why) in [
            (tgz(&[("/etc/passwd", b"x", None)]), "leaves the chart"),
            (tgz(&[("web/../../x", b"x", None)]), "leaves the chart"),
            (tgz(&[("web/link", b"", Some("/etc/shadow"))]), "is a link"),
        ] {
            let e = check(&bad).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn a_gzip_bomb_is_stopped_at_the_unpacked_bound() {
        // 65 MiB of zeros in one entry packs to about 65 KB.
        let zeros = vec![0u8; 65 * 1024 * 1024];
        let bomb = tgz(&[("web/big", &zeros, None)]);
        assert!(bomb.len() < 1024 * 1024, "{}", bomb.len());
        let e = check(&bomb).unwrap_err();
        assert!(e.contains("unpacks to more than"), "{e}");
    }

    #[test]
    fn too_many_entries_are_refused() {
        let names: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("web/f{i}")).collect();
        let entries: Vec<(&str, &[u8], Option<&str>)> =
            names.iter().map(|n| (n.as_str(), &b""[..], None)).collect();
        let e = check(&tgz(&entries)).unwrap_err();
        assert!(e.contains("more than 10000 entries"), "{e}");
    }

    #[test]
    fn garbage_is_not_an_archive() {
        let e = check(b"<html>secret-token</html>").unwrap_err();
        assert!(!e.contains("secret-token"), "{e}");
    }
}
