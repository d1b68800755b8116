//! helm's command line for each action, built from a request for the helm
//! found at start ([`HelmCli`]; pure: the runner spawns it). Each field of a
//! HelmApp's `install` / `upgrade` / `rollback` / `uninstall` / `test`
//! settings is one helm flag, and only on the action it belongs to — the
//! unit tests below are the table, run for helm 4 and helm 3.
//!
//! Where the two differ: `--force` is helm 4's `--force-replace`;
//! `--server-side` exists in helm 4 only (helm 3 applies client-side);
//! helm 4's `--post-renderer` names a plugin ([`POST_RENDER_PLUGIN`],
//! installed by the runner), helm 3's a program.
//!
//! Never on a command line: values (they go on stdin), credentials, patch
//! contents (the post-renderer reads them from a file).
//!
//! Positionals (release, chart, revision) come last, after `--`: whatever a
//! name holds, helm reads it as a name, never as a flag — on top of the
//! release name's check where the runner starts helm
//! (`super::check_release_name`).

use std::path::Path;
use std::time::Duration;

pub use super::version::HelmCli;

/// helm 4's `--server-side`: whether objects are applied by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerSide {
    /// `auto`: as the release's previous revision was applied (helm 3's
    /// releases: client-side).
    Auto,
    /// `true`.
    Enabled,
    /// `false`.
    Disabled,
}

impl ServerSide {
    /// What helm 4 makes of this for a release whose revision it reads
    /// (an upgrade's newest, a rollback's target) was applied server-side
    /// or not: `auto` follows it.
    pub fn resolved(self, previous_server_side: bool) -> ServerSide {
        match self {
            ServerSide::Auto if previous_server_side => ServerSide::Enabled,
            ServerSide::Auto => ServerSide::Disabled,
            said => said,
        }
    }

    fn flag_value(self) -> &'static str {
        match self {
            ServerSide::Auto => "auto",
            ServerSide::Enabled => "true",
            ServerSide::Disabled => "false",
        }
    }
}

/// The helm 4 plugin (type `postrenderer/v1`) that runs the operator's
/// `post-render` subcommand.
pub const POST_RENDER_PLUGIN: &str = "hossted-post-render";
/// The flags an install, upgrade or rollback may carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    /// `--no-hooks`.
    pub no_hooks: bool,
    /// `--force` (helm 4: `--force-replace`; upgrade, rollback).
    pub force: bool,
    /// `--cleanup-on-fail` (upgrade, rollback).
    pub cleanup_on_fail: bool,
    /// `--skip-schema-validation` (install, upgrade).
    pub skip_schema_validation: bool,
    /// `--disable-openapi-validation` (install, upgrade).
    pub disable_openapi_validation: bool,
    /// helm 4's `--server-side` (install, upgrade); `None`: helm's default
    /// (`true` for an install, `auto` for an upgrade or a rollback). Not
    /// said to helm 3; `false` whenever `force` is set.
    pub server_side: Option<ServerSide>,
    /// helm 4's `--force-conflicts`: said only with `server_side`
    /// `Enabled` (helm refuses it with a client-side apply, and with
    /// `--force-replace`).
    pub force_conflicts: bool,
}

/// `helm upgrade --install`: an install when no release exists, else an
/// upgrade — `flags` are the ones of that action. With `absent`, `helm
/// install`.
#[derive(Debug, Clone)]
pub struct Upgrade<'a> {
    /// No revision of the release exists (nothing in Helm's storage,
    /// nothing recorded): `helm install`, which refuses the name if a
    /// revision appeared since the operator looked — helm never reads, let
    /// alone upgrades from, a revision nobody checked — and makes one
    /// history read and one version probe fewer than `upgrade --install`.
    pub absent: bool,
    pub release: &'a str,
    pub namespace: &'a str,
    /// A local chart (directory or `.tgz`).
    pub chart: &'a Path,
    /// The merged values document (JSON is YAML), written on stdin.
    pub values: &'a serde_json::Value,
    /// `--labels` on the release's storage.
    pub labels: &'a [(&'a str, &'a str)],
    pub create_namespace: bool,
    pub skip_crds: bool,
    /// The user helm impersonates (`--kube-as-user`); `None`: the operator.
    pub as_user: Option<&'a str>,
    pub timeout: Duration,
    pub flags: Flags,
    /// `--history-max` (0: all revisions kept).
    pub history_max: i32,
    /// `--post-renderer`: the program and the file it reads its work from.
    pub post_renderer: Option<PostRender<'a>>,
}

/// helm's `--post-renderer`: `binary post-render <config>`.
#[derive(Debug, Clone, Copy)]
pub struct PostRender<'a> {
    pub binary: &'a Path,
    /// The post-renderer's settings (patches, images, metadata): a file of
    /// the private work directory, removed after the run.
    pub config: &'a Path,
}

/// `helm rollback` to `revision`.
#[derive(Debug, Clone)]
pub struct Rollback<'a> {
    pub release: &'a str,
    pub namespace: &'a str,
    pub revision: i64,
    pub as_user: Option<&'a str>,
    pub timeout: Duration,
    /// `no_hooks`, `force`, `cleanup_on_fail` apply.
    pub flags: Flags,
    pub history_max: i32,
    /// `--wait` (helm 4: its `watcher` strategy).
    pub wait: bool,
    /// `--wait-for-jobs`, said only with `wait`.
    pub wait_for_jobs: bool,
}

/// `helm uninstall --ignore-not-found`.
#[derive(Debug, Clone)]
pub struct Uninstall<'a> {
    pub release: &'a str,
    pub namespace: &'a str,
    pub as_user: Option<&'a str>,
    pub timeout: Duration,
    pub no_hooks: bool,
    /// `--keep-history`.
    pub keep_history: bool,
    /// `--cascade`: `background`, `foreground` or `orphan`.
    pub cascade: &'a str,
    /// `--wait`: until the objects are gone.
    pub wait: bool,
}

/// `helm test`.
#[derive(Debug, Clone)]
pub struct Test<'a> {
    pub release: &'a str,
    pub namespace: &'a str,
    pub as_user: Option<&'a str>,
    pub timeout: Duration,
    /// helm's `--filter` values (`name=…`, `!name=…`), checked names.
    pub filters: &'a [String],
}

/// `helm get manifest`: the newest revision's manifest.
#[derive(Debug, Clone)]
pub struct GetManifest<'a> {
    pub release: &'a str,
    pub namespace: &'a str,
    pub as_user: Option<&'a str>,
}

/// The subcommand of the operator's binary helm runs as post-renderer.
pub const POST_RENDER_SUBCOMMAND: &str = "post-render";

impl Upgrade<'_> {
    pub fn args(&self, cli: HelmCli) -> Vec<String> {
        self.line(cli).finish()
    }

    fn line(&self, cli: HelmCli) -> Line {
        let labels = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut args = if self.absent {
            strings(&["install"])
        } else {
            strings(&["upgrade", "--install"])
        };
        args.extend(strings(&[
            "--namespace",
            self.namespace,
            "--values",
            "-",
            "--labels",
            &labels,
            "--output",
            "json",
        ]));
        if !self.absent {
            // The values are the HelmApp's alone: never the stored
            // revision's (helm reuses them when the ones given are empty —
            // and the stored ones are whatever Helm's storage says). An
            // upgrade's flags, as the history bound is: `helm install`
            // reads no revision and refuses both.
            args.push("--reset-values".into());
        }
        timeout(&mut args, self.timeout);
        if !self.absent {
            history_max(&mut args, self.history_max);
        }
        switch(&mut args, self.create_namespace, "--create-namespace");
        switch(&mut args, self.skip_crds, "--skip-crds");
        let flags_said = if self.absent {
            install_flags(self.flags)
        } else {
            self.flags
        };
        flags(&mut args, flags_said, cli);
        // Applied server-side, each object is validated by the server,
        // field by field (helm sends `fieldValidation=Strict` whatever this
        // flag says): helm's download of the OpenAPI schema would only ask
        // the server whether it validates — a request and a schema read
        // per run that change nothing applied (docs/delivery.md "What helm
        // is asked"). An install's or upgrade's flag: `helm rollback` has
        // none.
        let applied_server_side =
            cli == HelmCli::V4 && server_side(flags_said) == Some(ServerSide::Enabled);
        switch(
            &mut args,
            applied_server_side && !flags_said.disable_openapi_validation,
            "--disable-openapi-validation",
        );
        if let Some(p) = &self.post_renderer {
            let config = p.config.display().to_string();
            args.extend(match cli {
                HelmCli::V3 => strings(&[
                    "--post-renderer",
                    &p.binary.display().to_string(),
                    "--post-renderer-args",
                    POST_RENDER_SUBCOMMAND,
                    "--post-renderer-args",
                    &config,
                ]),
                // The plugin runs `<binary> post-render`; its argument is
                // the file.
                HelmCli::V4 => strings(&[
                    "--post-renderer",
                    POST_RENDER_PLUGIN,
                    "--post-renderer-args",
                    &config,
                ]),
            });
        }
        impersonate(&mut args, self.as_user);
        Line {
            flags: args,
            positionals: vec![self.release.into(), self.chart.display().to_string()],
        }
    }
}

impl Rollback<'_> {
    pub fn args(&self, cli: HelmCli) -> Vec<String> {
        let mut args = strings(&["rollback", "--namespace", self.namespace]);
        timeout(&mut args, self.timeout);
        history_max(&mut args, self.history_max);
        // `--wait` alone: helm 3's switch, helm 4's `watcher` strategy.
        switch(&mut args, self.wait, "--wait");
        switch(
            &mut args,
            self.wait && self.wait_for_jobs,
            "--wait-for-jobs",
        );
        flags(
            &mut args,
            Flags {
                // helm rollback has no schema to validate.
                skip_schema_validation: false,
                disable_openapi_validation: false,
                ..self.flags
            },
            cli,
        );
        impersonate(&mut args, self.as_user);
        Line {
            flags: args,
            positionals: vec![self.release.into(), self.revision.to_string()],
        }
        .finish()
    }
}

impl Uninstall<'_> {
    pub fn args(&self) -> Vec<String> {
        let mut args = strings(&[
            "uninstall",
            "--ignore-not-found",
            "--namespace",
            self.namespace,
        ]);
        timeout(&mut args, self.timeout);
        switch(&mut args, self.no_hooks, "--no-hooks");
        switch(&mut args, self.keep_history, "--keep-history");
        switch(&mut args, self.wait, "--wait");
        // background is helm's own default: said only when it differs.
        if self.cascade != "background" {
            args.extend(strings(&["--cascade", self.cascade]));
        }
        impersonate(&mut args, self.as_user);
        Line::release(args, self.release)
    }
}

impl Upgrade<'_> {
    /// The same command as a client-side dry run: helm renders (the
    /// post-renderer too) and prints the release it would make; nothing in
    /// the cluster changes.
    pub fn dry_run_args(&self, cli: HelmCli) -> Vec<String> {
        let mut line = self.line(cli);
        line.flags.push("--dry-run=client".into());
        line.finish()
    }
}

impl GetManifest<'_> {
    pub fn args(&self) -> Vec<String> {
        let mut args = strings(&["get", "manifest", "--namespace", self.namespace]);
        impersonate(&mut args, self.as_user);
        Line::release(args, self.release)
    }
}

impl Test<'_> {
    pub fn args(&self) -> Vec<String> {
        let mut args = strings(&["test", "--namespace", self.namespace]);
        timeout(&mut args, self.timeout);
        for filter in self.filters {
            args.push("--filter".into());
            args.push(filter.clone());
        }
        impersonate(&mut args, self.as_user);
        Line::release(args, self.release)
    }
}

/// A command line being built: the subcommand and its flags, then the
/// positionals, which [`Line::finish`] puts after `--`.
struct Line {
    flags: Vec<String>,
    positionals: Vec<String>,
}

impl Line {
    /// `flags -- release`.
    fn release(flags: Vec<String>, release: &str) -> Vec<String> {
        Line {
            flags,
            positionals: vec![release.into()],
        }
        .finish()
    }

    fn finish(self) -> Vec<String> {
        let mut args = self.flags;
        args.push("--".into());
        args.extend(self.positionals);
        args
    }
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| s.to_string()).collect()
}

fn timeout(args: &mut Vec<String>, timeout: Duration) {
    args.push("--timeout".into());
    args.push(format!("{}s", timeout.as_secs().max(1)));
}

fn history_max(args: &mut Vec<String>, max: i32) {
    args.push("--history-max".into());
    args.push(max.max(0).to_string());
}

/// What of `f` `helm install` takes: no `--cleanup-on-fail` (an upgrade's
/// flag), and helm 4's `--server-side` is a switch there — `auto` (helm's
/// default for `upgrade --install`) installs server-side.
fn install_flags(f: Flags) -> Flags {
    Flags {
        cleanup_on_fail: false,
        server_side: f.server_side.map(|s| match s {
            ServerSide::Auto => ServerSide::Enabled,
            said => said,
        }),
        ..f
    }
}

/// helm 4 replaces objects client-side only: it refuses `--force-replace`
/// with server-side apply, so a forced run applies client-side (and
/// `auto` keeps that until an upgrade says `enabled`).
fn server_side(f: Flags) -> Option<ServerSide> {
    if f.force {
        Some(ServerSide::Disabled)
    } else {
        f.server_side
    }
}

fn switch(args: &mut Vec<String>, on: bool, flag: &str) {
    if on {
        args.push(flag.into());
    }
}

fn flags(args: &mut Vec<String>, f: Flags, cli: HelmCli) {
    switch(args, f.no_hooks, "--no-hooks");
    let force = match cli {
        HelmCli::V3 => "--force",
        HelmCli::V4 => "--force-replace",
    };
    switch(args, f.force, force);
    switch(args, f.cleanup_on_fail, "--cleanup-on-fail");
    switch(args, f.skip_schema_validation, "--skip-schema-validation");
    switch(
        args,
        f.disable_openapi_validation,
        "--disable-openapi-validation",
    );
    let server_side = server_side(f);
    if let (HelmCli::V4, Some(s)) = (cli, server_side) {
        args.push(format!("--server-side={}", s.flag_value()));
        switch(
            args,
            f.force_conflicts && s == ServerSide::Enabled,
            "--force-conflicts",
        );
    }
}

/// `--kube-as-user`: every helm action of a HelmApp outside the privileged
/// namespaces runs as its ServiceAccount (`crate::delivery::tenancy`).
fn impersonate(args: &mut Vec<String>, as_user: Option<&str>) {
    if let Some(user) = as_user {
        args.push("--kube-as-user".into());
        args.push(user.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: [HelmCli; 2] = [HelmCli::V4, HelmCli::V3];

    fn has(args: &[String], flag: &str) -> bool {
        args.iter().any(|a| a == flag)
    }

    fn after<'a>(args: &'a [String], flag: &str) -> Vec<&'a str> {
        args.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].as_str())
            .collect()
    }

    /// The `--force` of each helm.
    fn force(cli: HelmCli) -> &'static str {
        match cli {
            HelmCli::V3 => "--force",
            HelmCli::V4 => "--force-replace",
        }
    }

    fn upgrade(flags: Flags, cli: HelmCli) -> Vec<String> {
        release(false, flags, cli)
    }

    fn release(absent: bool, flags: Flags, cli: HelmCli) -> Vec<String> {
        let values = serde_json::json!({ "password": "never-on-a-command-line" });
        Upgrade {
            absent,
            release: "web",
            namespace: "apps",
            chart: Path::new("/work/charts/web.tgz"),
            values: &values,
            labels: &[
                ("hossted.com/config-hash", "abc"),
                ("hossted.com/uid", "u1"),
            ],
            create_namespace: false,
            skip_crds: false,
            as_user: None,
            timeout: Duration::from_secs(300),
            flags,
            history_max: 5,
            post_renderer: None,
        }
        .args(cli)
    }

    /// The words after `--`.
    fn positionals(args: &[String]) -> &[String] {
        let end = args
            .iter()
            .position(|a| a == "--")
            .unwrap_or_else(|| panic!("no `--` in {args:?}"));
        &args[end + 1..]
    }

    #[test]
    fn every_command_puts_its_names_after_a_double_dash() {
        // What a name holds never reads as a flag (the runner refuses such
        // a name before this; this is the second wall).
        let release = "--kube-apiserver=https://elsewhere";
        let values = serde_json::json!({});
        for cli in BOTH {
            let u = Upgrade {
                absent: false,
                release,
                namespace: "apps",
                chart: Path::new("--chart"),
                values: &values,
                labels: &[],
                create_namespace: false,
                skip_crds: false,
                as_user: Some("system:serviceaccount:apps:deployer"),
                timeout: Duration::from_secs(1),
                flags: Flags::default(),
                history_max: 0,
                post_renderer: None,
            };
            assert_eq!(positionals(&u.args(cli)), [release, "--chart"]);
            let dry = u.dry_run_args(cli);
            assert_eq!(positionals(&dry), [release, "--chart"]);
            assert!(has(&dry[..dry.len() - 3], "--dry-run=client"));
            let r = Rollback {
                release,
                namespace: "apps",
                revision: 3,
                as_user: None,
                timeout: Duration::from_secs(1),
                flags: Flags::default(),
                history_max: 0,
                wait: true,
                wait_for_jobs: true,
            };
            assert_eq!(positionals(&r.args(cli)), [release, "3"]);
        }
        let un = Uninstall {
            release,
            namespace: "apps",
            as_user: None,
            timeout: Duration::from_secs(1),
            no_hooks: false,
            keep_history: false,
            cascade: "orphan",
            wait: true,
        };
        assert_eq!(positionals(&un.args()), [release]);
        let t = Test {
            release,
            namespace: "apps",
            as_user: None,
            timeout: Duration::from_secs(1),
            filters: &[],
        };
        assert_eq!(positionals(&t.args()), [release]);
        let g = GetManifest {
            release,
            namespace: "apps",
            as_user: None,
        };
        assert_eq!(positionals(&g.args()), [release]);
    }

    #[test]
    fn an_upgrade_carries_exactly_the_flags_asked_for() {
        for cli in BOTH {
            let plain = upgrade(Flags::default(), cli);
            for flag in [
                "--no-hooks",
                "--force",
                "--force-replace",
                "--cleanup-on-fail",
                "--skip-schema-validation",
                "--post-renderer",
                "--kube-as-user",
            ] {
                assert!(
                    !has(&plain, flag),
                    "{cli:?}: {flag} without being asked: {plain:?}"
                );
            }
            assert!(
                !plain.iter().any(|a| a.starts_with("--server-side")),
                "{cli:?}: helm's default"
            );
            assert_eq!(after(&plain, "--history-max"), ["5"]);
            assert_eq!(after(&plain, "--values"), ["-"], "values on stdin");
            assert!(has(&plain, "--reset-values"), "never the stored values");
            assert!(!plain.iter().any(|a| a.contains("never-on")));
            let all = upgrade(
                Flags {
                    no_hooks: true,
                    force: true,
                    cleanup_on_fail: true,
                    skip_schema_validation: true,
                    disable_openapi_validation: true,
                    server_side: None,
                    force_conflicts: true,
                },
                cli,
            );
            for flag in [
                "--no-hooks",
                force(cli),
                "--cleanup-on-fail",
                "--skip-schema-validation",
                "--disable-openapi-validation",
            ] {
                assert_eq!(
                    all.iter().filter(|a| *a == flag).count(),
                    1,
                    "{cli:?}: {flag}"
                );
            }
            let other_force = force(if cli == HelmCli::V4 {
                HelmCli::V3
            } else {
                HelmCli::V4
            });
            assert!(
                !has(&all, other_force),
                "{cli:?}: never the other helm's {other_force}"
            );
        }
    }

    #[test]
    fn server_side_apply_is_said_to_helm_4_only() {
        for (side, value) in [
            (ServerSide::Auto, "--server-side=auto"),
            (ServerSide::Enabled, "--server-side=true"),
            (ServerSide::Disabled, "--server-side=false"),
        ] {
            let flags = Flags {
                server_side: Some(side),
                ..Flags::default()
            };
            assert!(has(&upgrade(flags, HelmCli::V4), value), "{side:?}");
            let v3 = upgrade(flags, HelmCli::V3);
            assert!(!v3.iter().any(|a| a.starts_with("--server-side")), "{v3:?}");
            // helm 4 refuses to replace objects server-side.
            let forced = Flags {
                force: true,
                ..flags
            };
            let v4 = upgrade(forced, HelmCli::V4);
            assert!(
                has(&v4, "--force-replace") && has(&v4, "--server-side=false"),
                "{v4:?}"
            );
            assert_eq!(
                v4.iter().filter(|a| a.starts_with("--server-side")).count(),
                1
            );
        }
    }

    #[test]
    fn a_release_without_a_revision_is_installed_with_only_the_flags_install_takes() {
        let every = Flags {
            no_hooks: true,
            force: false,
            cleanup_on_fail: true,
            skip_schema_validation: true,
            disable_openapi_validation: false,
            server_side: Some(ServerSide::Auto),
            force_conflicts: true,
        };
        for cli in BOTH {
            let install = release(true, every, cli);
            assert_eq!(install[0], "install", "{install:?}");
            // An upgrade's flags: `helm install` refuses them.
            for upgrade_only in [
                "--install",
                "--reset-values",
                "--history-max",
                "--cleanup-on-fail",
            ] {
                assert!(!has(&install, upgrade_only), "{cli:?}: {install:?}");
            }
            for kept in ["--no-hooks", "--skip-schema-validation", "--timeout"] {
                assert!(has(&install, kept), "{cli:?}: {install:?}");
            }
            assert_eq!(after(&install, "--output"), ["json"]);
            assert_eq!(after(&install, "--values"), ["-"]);
            assert_eq!(positionals(&install), ["web", "/work/charts/web.tgz"]);
            let upgrade = release(false, every, cli);
            assert_eq!(upgrade[..2], ["upgrade", "--install"], "{upgrade:?}");
            for upgrade_only in ["--reset-values", "--history-max", "--cleanup-on-fail"] {
                assert!(has(&upgrade, upgrade_only), "{cli:?}: {upgrade:?}");
            }
            match cli {
                // install's `--server-side` is a switch: `auto` installs
                // server-side, as `upgrade --install` of no release does,
                // and conflicts are forced and validated by the server.
                HelmCli::V4 => {
                    assert_eq!(
                        install
                            .iter()
                            .filter(|a| a.starts_with("--server-side"))
                            .collect::<Vec<_>>(),
                        ["--server-side=true"]
                    );
                    assert!(has(&install, "--force-conflicts"), "{install:?}");
                    assert!(has(&install, "--disable-openapi-validation"), "{install:?}");
                    assert!(has(&upgrade, "--server-side=auto"), "{upgrade:?}");
                }
                HelmCli::V3 => {
                    assert!(!install.iter().any(|a| a.starts_with("--server-side")));
                }
            }
        }
    }

    #[test]
    fn the_openapi_download_is_skipped_where_the_server_validates_each_object() {
        const FLAG: &str = "--disable-openapi-validation";
        for (cli, side, force, skipped) in [
            // Applied server-side: the server validates field by field.
            (HelmCli::V4, Some(ServerSide::Enabled), false, true),
            // Anything else: as the spec asks (here: not).
            (HelmCli::V4, Some(ServerSide::Enabled), true, false),
            (HelmCli::V4, Some(ServerSide::Disabled), false, false),
            (HelmCli::V4, Some(ServerSide::Auto), false, false),
            (HelmCli::V4, None, false, false),
            (HelmCli::V3, Some(ServerSide::Enabled), false, false),
        ] {
            let flags = Flags {
                server_side: side,
                force,
                ..Flags::default()
            };
            let args = upgrade(flags, cli);
            assert_eq!(has(&args, FLAG), skipped, "{cli:?} {side:?} force {force}");
            let asked = Flags {
                disable_openapi_validation: true,
                ..flags
            };
            let args = upgrade(asked, cli);
            assert_eq!(args.iter().filter(|a| *a == FLAG).count(), 1, "{cli:?}");
        }
    }

    #[test]
    fn conflicts_are_forced_only_where_helm_applies_server_side() {
        for (side, said) in [
            (Some(ServerSide::Enabled), true),
            // helm refuses `--force-conflicts` beside a client-side apply,
            // and `auto` is resolved before a command line is made.
            (Some(ServerSide::Auto), false),
            (Some(ServerSide::Disabled), false),
            (None, false),
        ] {
            let flags = Flags {
                server_side: side,
                force_conflicts: true,
                ..Flags::default()
            };
            assert_eq!(
                has(&upgrade(flags, HelmCli::V4), "--force-conflicts"),
                said,
                "{side:?}"
            );
            assert!(!has(&upgrade(flags, HelmCli::V3), "--force-conflicts"));
            let forced = upgrade(
                Flags {
                    force: true,
                    ..flags
                },
                HelmCli::V4,
            );
            assert!(!has(&forced, "--force-conflicts"), "{forced:?}");
            let asked_not = upgrade(
                Flags {
                    force_conflicts: false,
                    ..flags
                },
                HelmCli::V4,
            );
            assert!(!has(&asked_not, "--force-conflicts"));
        }
        assert_eq!(ServerSide::Auto.resolved(true), ServerSide::Enabled);
        assert_eq!(ServerSide::Auto.resolved(false), ServerSide::Disabled);
        assert_eq!(ServerSide::Disabled.resolved(true), ServerSide::Disabled);
        assert_eq!(ServerSide::Enabled.resolved(false), ServerSide::Enabled);
    }

    fn post_rendered(cli: HelmCli) -> Vec<String> {
        let values = serde_json::json!({});
        Upgrade {
            absent: false,
            release: "web",
            namespace: "apps",
            chart: Path::new("/c"),
            values: &values,
            labels: &[],
            create_namespace: true,
            skip_crds: true,
            as_user: Some("system:serviceaccount:apps:hossted-deployer"),
            timeout: Duration::from_millis(10),
            flags: Flags::default(),
            history_max: 0,
            post_renderer: Some(PostRender {
                binary: Path::new("/bin/hossted-operator"),
                config: Path::new("/work/post-render/x.json"),
            }),
        }
        .args(cli)
    }

    #[test]
    fn the_post_renderer_is_named_with_its_file_not_its_content() {
        let v3 = post_rendered(HelmCli::V3);
        assert_eq!(after(&v3, "--post-renderer"), ["/bin/hossted-operator"]);
        assert_eq!(
            after(&v3, "--post-renderer-args"),
            [POST_RENDER_SUBCOMMAND, "/work/post-render/x.json"]
        );
        // helm 4 runs a plugin, which runs the subcommand.
        let v4 = post_rendered(HelmCli::V4);
        assert_eq!(after(&v4, "--post-renderer"), [POST_RENDER_PLUGIN]);
        assert_eq!(
            after(&v4, "--post-renderer-args"),
            ["/work/post-render/x.json"]
        );
        for args in [v3, v4] {
            assert_eq!(
                after(&args, "--history-max"),
                ["0"],
                "0 keeps every revision"
            );
            assert_eq!(after(&args, "--timeout"), ["1s"], "never 0s");
            assert!(has(&args, "--create-namespace") && has(&args, "--skip-crds"));
            assert_eq!(
                after(&args, "--kube-as-user"),
                ["system:serviceaccount:apps:hossted-deployer"]
            );
        }
    }

    #[test]
    fn a_rollback_takes_its_own_flags_and_the_history_bound() {
        let waiting = |wait, wait_for_jobs| Rollback {
            release: "web",
            namespace: "apps",
            revision: 3,
            as_user: None,
            timeout: Duration::from_secs(60),
            flags: Flags::default(),
            history_max: 2,
            wait,
            wait_for_jobs,
        };
        let r = |flags| Rollback {
            flags,
            ..waiting(false, true)
        };
        for cli in BOTH {
            let plain = r(Flags::default()).args(cli);
            assert_eq!(plain[0], "rollback");
            assert_eq!(positionals(&plain), ["web", "3"]);
            assert_eq!(after(&plain, "--history-max"), ["2"]);
            assert!(!has(&plain, force(cli)) && !has(&plain, "--no-hooks"));
            assert!(
                !has(&plain, "--wait") && !has(&plain, "--wait-for-jobs"),
                "no wait unless asked, and jobs only with it"
            );
            // helm rollback has no OpenAPI flag: never given, however
            // the rollback applies.
            let server_side = r(Flags {
                server_side: Some(ServerSide::Enabled),
                ..Flags::default()
            })
            .args(cli);
            assert!(!has(&server_side, "--disable-openapi-validation"));
            let waits = waiting(true, true).args(cli);
            assert!(has(&waits, "--wait") && has(&waits, "--wait-for-jobs"));
            let no_jobs = waiting(true, false).args(cli);
            assert!(has(&no_jobs, "--wait") && !has(&no_jobs, "--wait-for-jobs"));
            let all = r(Flags {
                no_hooks: true,
                force: true,
                cleanup_on_fail: true,
                skip_schema_validation: true,
                disable_openapi_validation: true,
                server_side: Some(ServerSide::Enabled),
                force_conflicts: true,
            })
            .args(cli);
            assert!(
                has(&all, "--no-hooks") && has(&all, force(cli)) && has(&all, "--cleanup-on-fail")
            );
            assert!(
                !has(&all, "--skip-schema-validation")
                    && !has(&all, "--disable-openapi-validation"),
                "helm rollback has no such flags"
            );
            let sides: Vec<&String> = all
                .iter()
                .filter(|a| a.starts_with("--server-side"))
                .collect();
            match cli {
                // Forced: replaced, so client-side (helm 4 refuses both).
                HelmCli::V4 => assert_eq!(sides, ["--server-side=false"]),
                HelmCli::V3 => assert!(sides.is_empty()),
            }
            let unforced = r(Flags {
                server_side: Some(ServerSide::Enabled),
                ..Flags::default()
            })
            .args(cli);
            match cli {
                HelmCli::V4 => assert!(has(&unforced, "--server-side=true"), "{unforced:?}"),
                HelmCli::V3 => assert!(!unforced.iter().any(|a| a.starts_with("--server-side"))),
            }
            assert!(
                !has(&all, "--force-conflicts"),
                "helm refuses --force-conflicts beside --force-replace"
            );
        }
    }

    #[test]
    fn an_uninstall_keeps_history_and_cascades_only_when_asked() {
        let u = |no_hooks, keep_history, cascade| {
            Uninstall {
                release: "web",
                namespace: "apps",
                as_user: None,
                timeout: Duration::from_secs(60),
                no_hooks,
                keep_history,
                cascade,
                wait: no_hooks,
            }
            .args()
        };
        let plain = u(false, false, "background");
        assert!(has(&plain, "--ignore-not-found"));
        for flag in [
            "--no-hooks",
            "--keep-history",
            "--cascade",
            "--history-max",
            "--wait",
        ] {
            assert!(!has(&plain, flag), "{flag}: {plain:?}");
        }
        let all = u(true, true, "orphan");
        assert!(has(&all, "--no-hooks") && has(&all, "--keep-history") && has(&all, "--wait"));
        assert_eq!(after(&all, "--cascade"), ["orphan"]);
        assert_eq!(
            after(&u(false, false, "foreground"), "--cascade"),
            ["foreground"]
        );
    }

    #[test]
    fn a_test_run_names_the_release_and_its_identity() {
        let args = Test {
            release: "web",
            namespace: "apps",
            as_user: Some("system:serviceaccount:apps:t"),
            timeout: Duration::from_secs(120),
            filters: &["name=web-test".into(), "!name=web-slow".into()],
        }
        .args();
        assert_eq!(args[0], "test");
        assert_eq!(
            after(&args, "--filter"),
            ["name=web-test", "!name=web-slow"]
        );
        assert_eq!(positionals(&args), ["web"]);
        assert_eq!(after(&args, "--timeout"), ["120s"]);
        assert_eq!(
            after(&args, "--kube-as-user"),
            ["system:serviceaccount:apps:t"]
        );
        assert!(!has(&args, "--history-max") && !has(&args, "--force"));
    }
}
