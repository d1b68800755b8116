//! ID tokens as a hostile browser or provider would bring them: signed by
//! another key, with another algorithm, for another client, expired, with
//! another nonce, naming a `system:` identity — and every byte of a good
//! one changed at random.

use super::*;
use proptest::prelude::*;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::json;

const ISSUER: &str = "https://id.example.com";
const CLIENT: &str = "hossted-ui";
const NOW: u64 = 1_800_000_000;

struct Signer {
    pair: EcdsaKeyPair,
    kid: &'static str,
}

impl Signer {
    fn new(kid: &'static str) -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        Signer { pair, kid }
    }

    fn key(&self) -> Key {
        Key::P256 {
            kid: Some(self.kid.into()),
            point: self.pair.public_key().as_ref().to_vec(),
        }
    }

    fn sign(&self, header: &Value, claims: &Value) -> String {
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = self
            .pair
            .sign(&SystemRandom::new(), signed.as_bytes())
            .unwrap();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }

    fn token(&self, claims: &Value) -> String {
        self.sign(&json!({ "alg": "ES256", "kid": self.kid }), claims)
    }
}

fn config() -> OidcConfig {
    OidcConfig {
        issuer: ISSUER.into(),
        client_id: CLIENT.into(),
        client_secret: "s3cret".into(),
        redirect_uri: "https://ui.example.com/callback".into(),
        scopes: vec!["openid".into(), "email".into()],
        username_claim: "email".into(),
        groups_claim: "groups".into(),
        username_prefix: String::new(),
        groups_prefix: String::new(),
        reserved_users: vec!["hossted-ui:reader".into()],
    }
}

fn provider(keys: Vec<Key>) -> Provider {
    Provider {
        config: config(),
        discovery: Discovery {
            issuer: ISSUER.into(),
            authorization_endpoint: format!("{ISSUER}/oauth2/auth"),
            token_endpoint: format!("{ISSUER}/oauth2/token"),
            // Never fetched: the keys are fresh.
            jwks_uri: "https://127.0.0.1:1/jwks".into(),
            end_session_endpoint: None,
        },
        keys: Mutex::new((keys, std::time::Instant::now())),
        agent: ureq::Agent::new_with_defaults(),
    }
}

fn claims() -> Value {
    json!({ "iss": ISSUER, "aud": CLIENT, "exp": NOW + 600, "iat": NOW, "nonce": "n-1",
            "email": "alice@example.com", "email_verified": true, "groups": ["team-a"] })
}

/// The identity a token gives, all checks made as at [`NOW`].
fn signed_in(p: &Provider, token: &str) -> Result<Identity, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let claims = runtime.block_on(p.verify(token))?;
    p.identity(&claims, "n-1", NOW)
}

#[test]
fn a_good_token_gives_the_username_and_groups_until_it_expires() {
    let signer = Signer::new("k1");
    let p = provider(vec![signer.key()]);
    let id = signed_in(&p, &signer.token(&claims())).unwrap();
    assert_eq!(id.username, "alice@example.com");
    assert_eq!(id.groups, vec!["team-a".to_string()]);
    assert_eq!(id.expires, UNIX_EPOCH + Duration::from_secs(NOW + 600));
}

#[test]
fn another_key_algorithm_client_issuer_nonce_or_time_is_refused() {
    let signer = Signer::new("k1");
    let p = provider(vec![signer.key()]);
    // Another key under the same kid.
    let impostor = Signer::new("k1");
    assert!(signed_in(&p, &impostor.token(&claims())).is_err());
    // alg none, HMAC with the public key as the secret, PS256.
    for alg in ["none", "HS256", "PS256", "RS384"] {
        let t = signer.sign(&json!({ "alg": alg, "kid": "k1" }), &claims());
        assert!(signed_in(&p, &t).is_err(), "{alg}");
    }
    let unsigned = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(json!({ "alg": "none" }).to_string()),
        URL_SAFE_NO_PAD.encode(claims().to_string())
    );
    assert!(signed_in(&p, &unsigned).is_err());
    let mut changed = Vec::new();
    for (field, value) in [
        ("iss", json!("https://evil.example.com")),
        ("aud", json!("another-client")),
        ("aud", json!([CLIENT, "another-client"])),
        ("exp", json!(NOW - 61)),
        ("iat", json!(NOW + 3600)),
        ("nonce", json!("n-2")),
        ("email", json!("")),
        ("email", json!("system:admin")),
        ("groups", json!(["team-a", "system:masters"])),
        // Go's header reader trims these: " system:masters" arrives bare.
        ("groups", json!([" system:masters"])),
        ("groups", json!(["system:masters\t"])),
        ("email", json!(" system:admin")),
        ("email", json!("hossted-ui:reader")),
        ("email_verified", json!(false)),
        ("email_verified", json!("true")),
        ("groups", json!(vec!["g"; MAX_GROUPS + 1])),
    ] {
        let mut c = claims();
        c[field] = value.clone();
        let result = signed_in(&p, &signer.token(&c));
        assert!(result.is_err(), "{field}={value}: {result:?}");
        changed.push(field);
    }
    // Several audiences are taken when the authorized party is us.
    let mut c = claims();
    c["aud"] = json!([CLIENT, "another-client"]);
    c["azp"] = json!(CLIENT);
    assert!(signed_in(&p, &signer.token(&c)).is_ok());
    // A crit header is refused even when signed.
    let t = signer.sign(
        &json!({ "alg": "ES256", "kid": "k1", "crit": ["exp"] }),
        &claims(),
    );
    assert!(signed_in(&p, &t).is_err());
}

#[test]
fn prefixes_are_put_before_names_and_groups() {
    let signer = Signer::new("k1");
    let mut p = provider(vec![signer.key()]);
    p.config.username_prefix = "oidc:".into();
    p.config.groups_prefix = "oidc:".into();
    let id = signed_in(&p, &signer.token(&claims())).unwrap();
    assert_eq!(id.username, "oidc:alice@example.com");
    assert_eq!(id.groups, vec!["oidc:team-a".to_string()]);
}

#[test]
fn the_sign_in_url_carries_state_nonce_and_an_s256_challenge() {
    let p = provider(vec![]);
    let (url, pending) = p.begin("/app/team-a/web");
    let uri: http::Uri = url.parse().unwrap();
    let q = crate::ui::server::query(uri.query().unwrap());
    assert_eq!(q["client_id"], CLIENT);
    assert_eq!(q["state"], pending.state);
    assert_eq!(q["nonce"], pending.nonce);
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(
        q["code_challenge"],
        URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(pending.verifier.as_bytes()))
    );
    assert_eq!(q["redirect_uri"], "https://ui.example.com/callback");
    assert_eq!(q["scope"], "openid email");
    let (_, again) = p.begin("/");
    assert_ne!(pending.state, again.state, "a state per sign-in");
}

#[test]
fn provider_endpoints_are_https_or_loopback_http() {
    assert!(acceptable_url("https://id.example.com"));
    assert!(acceptable_url("http://127.0.0.1:4444/"));
    assert!(!acceptable_url("http://id.example.com"));
    assert!(!acceptable_url("file:///etc/passwd"));
    assert!(!acceptable_url("javascript:alert(1)"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any byte of a good token changed (to any value, at any place):
    /// never a sign-in, unless the token is still the same text.
    #[test]
    fn a_token_changed_anywhere_is_refused(at in any::<prop::sample::Index>(), to in any::<u8>()) {
        thread_local! {
            static SIGNER: Signer = Signer::new("k1");
        }
        SIGNER.with(|signer| {
            let p = provider(vec![signer.key()]);
            let good = signer.token(&claims());
            let mut bytes = good.clone().into_bytes();
            let i = at.index(bytes.len());
            bytes[i] = to;
            let changed = String::from_utf8_lossy(&bytes).into_owned();
            // base64url without padding: the last character's low bits may
            // carry nothing, so a change there can decode to the same bytes.
            let same_bytes = |a: &str, b: &str| {
                let parts = |t: &str| t.split('.').map(|p| URL_SAFE_NO_PAD.decode(p).ok()).collect::<Vec<_>>();
                parts(a) == parts(b)
            };
            if !same_bytes(&changed, &good) {
                prop_assert!(signed_in(&p, &changed).is_err(), "byte {} to {}", i, to);
            }
            Ok(())
        })?;
    }
}
