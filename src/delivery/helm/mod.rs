//! Running helm: [`runner`] is the one place a helm process is spawned;
//! [`values`] merges and redacts the values it is given on stdin.

pub mod args;
pub mod manifest_diff;
pub mod plugin;
pub mod post_render;
pub mod runner;
pub mod values;
pub mod version;

pub use args::ServerSide;
pub use runner::{
    Flags, GetManifest, Helm, HelmConfig, HelmError, PostRender, Released, Rendered, Rollback,
    Test, Uninstall, Upgrade,
};
pub use version::HelmCli;
