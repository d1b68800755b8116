//! Which addresses a chart source may be fetched from.
//!
//! A HelmApp's author picks `chart.repo`; without a policy, the operator's
//! pod would fetch from any address it can reach — the cloud metadata
//! service at 169.254.169.254 hands out node credentials. The policy is a
//! list of denied networks (`--deny-chart-source-cidrs`, default
//! link-local and unspecified), applied by the resolver the HTTP client
//! connects through: the address checked is the address connected to, with
//! no second lookup between the two (a DNS answer that changes between a
//! check and a connect cannot slip past).

use std::net::IpAddr;
use std::sync::Arc;

/// A network, `address/prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in this network (an IPv4-mapped IPv6 address counts
    /// as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.network, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;

    /// `10.0.0.0/8`, `fe80::/10`, or one address (`/32`, `/128`).
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, prefix) = s.split_once('/').unwrap_or((s, ""));
        let network: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an address/prefix"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = if prefix.is_empty() {
            max
        } else {
            prefix
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{s:?}: the prefix must be 0 to {max}"))?
        };
        Ok(Cidr { network, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// The default of `--deny-chart-source-cidrs`: link-local (where cloud
/// metadata services answer) and the unspecified addresses.
pub const DEFAULT_DENIED: &str = "169.254.0.0/16,fe80::/10,0.0.0.0/32,::/128";

/// The networks no chart is fetched from.
#[derive(Debug, Clone)]
pub struct AddressPolicy {
    denied: Arc<Vec<Cidr>>,
}

impl Default for AddressPolicy {
    fn default() -> Self {
        AddressPolicy::parse(DEFAULT_DENIED).unwrap_or(AddressPolicy {
            denied: Arc::new(Vec::new()),
        })
    }
}

impl AddressPolicy {
    /// A comma-separated list of networks (empty: none denied).
    pub fn parse(list: &str) -> Result<Self, String> {
        let denied = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<Cidr>, _>>()?;
        Ok(AddressPolicy {
            denied: Arc::new(denied),
        })
    }

    /// The denied network `ip` is in, if any. The unspecified addresses
    /// (`0.0.0.0`, `::`, which connect to the local host) are in the
    /// default list; they are checked as any other.
    pub fn refuses(&self, ip: IpAddr) -> Option<Cidr> {
        self.denied.iter().copied().find(|c| c.contains(ip))
    }
}

/// A connection refused by the policy: travels inside the HTTP client's
/// error to be told apart from a network failure.
#[derive(Debug, thiserror::Error)]
#[error("{address} is in {network}, which --deny-chart-source-cidrs refuses")]
pub struct Refused {
    pub address: IpAddr,
    pub network: Cidr,
}

/// The HTTP client's resolver with the policy applied to every answer.
#[derive(Debug)]
pub(super) struct PolicyResolver {
    pub policy: AddressPolicy,
    pub inner: ureq::unversioned::resolver::DefaultResolver,
}

impl ureq::unversioned::resolver::Resolver for PolicyResolver {
    fn resolve(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        let addrs = self.inner.resolve(uri, config, timeout)?;
        // Every address must pass: the client may try any of them.
        if let Some((address, network)) = addrs
            .iter()
            .find_map(|a| self.policy.refuses(a.ip()).map(|n| (a.ip(), n)))
        {
            return Err(ureq::Error::Other(Box::new(Refused { address, network })));
        }
        Ok(addrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const METADATA: IpAddr = IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254));
    const LINK_LOCAL_V6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1));

    #[test]
    fn the_default_refuses_link_local_and_unspecified_and_nothing_else() {
        let p = AddressPolicy::default();
        for denied in [
            METADATA,
            LINK_LOCAL_V6,
            "0.0.0.0".parse().unwrap(),
            "::".parse().unwrap(),
            "::ffff:169.254.169.254".parse().unwrap(),
        ] {
            assert!(p.refuses(denied).is_some(), "{denied}");
        }
        for allowed in ["127.0.0.1", "10.1.2.3", "::1", "2001:db8::1", "169.255.0.1"] {
            let ip: IpAddr = allowed.parse().unwrap();
            assert_eq!(p.refuses(ip), None, "{allowed}");
        }
    }

    #[test]
    fn a_list_is_parsed_or_refused_with_its_entry() {
        let p = AddressPolicy::parse("10.0.0.0/8, 127.0.0.1").unwrap();
        assert!(p.refuses("10.200.0.1".parse().unwrap()).is_some());
        assert!(p.refuses("127.0.0.1".parse().unwrap()).is_some());
        assert!(p.refuses("127.0.0.2".parse().unwrap()).is_none());
        assert!(
            AddressPolicy::parse("")
                .unwrap()
                .refuses(METADATA)
                .is_none()
        );
        assert!(
            AddressPolicy::parse("10.0.0.0/33")
                .unwrap_err()
                .contains("0 to 32")
        );
        assert!(
            AddressPolicy::parse("nope")
                .unwrap_err()
                .contains("\"nope\"")
        );
        assert_eq!(
            "fe80::/10".parse::<Cidr>().unwrap().to_string(),
            "fe80::/10"
        );
        assert!("0.0.0.0/0".parse::<Cidr>().unwrap().contains(METADATA));
    }
}
