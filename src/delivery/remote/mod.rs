//! Remote clusters' inputs (docs/remote-clusters.md): a HelmApp's
//! kubeconfig, read from a tenant's Secret and trusted for nothing but the
//! one cluster and the inline credentials it names. The clusters
//! themselves run in `crate::delivery::helmapp::remote`.

pub mod connect;
pub mod egress;
pub mod kubeconfig;
