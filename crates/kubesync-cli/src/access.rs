//! Who may read `/metrics`: the bearer token of each request is checked with the apiserver —
//! a TokenReview says who holds it, a SubjectAccessReview whether that user may `get` the
//! non-resource URL `/metrics` (the ClusterRole `kubesync-metrics-reader` grants it) — as
//! kubebuilder's operators and the kubelet do.
//!
//! Verdicts are remembered for [`REMEMBER_FOR`] per token (by its SHA-256, never the token
//! itself), at most [`MAX_REMEMBERED`] of them, so a scrape every few seconds costs the
//! apiserver two requests per [`REMEMBER_FOR`]; an apiserver that cannot answer is never
//! remembered. The decisions are pure ([`bearer_token`], [`access_review`], [`Verdicts`]).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};

/// How long a verdict on a token is remembered.
pub const REMEMBER_FOR: Duration = Duration::from_secs(10);

/// At most this many verdicts are remembered.
pub const MAX_REMEMBERED: usize = 1024;

/// The answer to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The token's holder may read.
    Allowed,
    /// No token, or one the apiserver does not accept (HTTP 401).
    Unauthenticated(String),
    /// The holder is known but may not read (HTTP 403).
    Forbidden(String),
    /// The apiserver could not be asked (HTTP 503); never remembered.
    Unavailable(String),
}

/// The token of an `Authorization: Bearer <token>` header value.
pub fn bearer_token(header: Option<&[u8]>) -> Option<&str> {
    let value = std::str::from_utf8(header?).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The SubjectAccessReview that asks whether `user` may `get` the non-resource URL `path`.
pub fn access_review(user: &UserInfo, path: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_string()),
                verb: Some("get".to_string()),
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Verdicts by token digest, each until it expires; bounded to [`MAX_REMEMBERED`].
#[derive(Debug, Default)]
pub struct Verdicts {
    by_token: HashMap<[u8; 32], (Instant, Verdict)>,
}

impl Verdicts {
    /// The digest a token is remembered by.
    pub fn digest(token: &str) -> [u8; 32] {
        Sha256::digest(token.as_bytes()).into()
    }

    /// The verdict on `token` remembered at `now`, if any.
    pub fn get(&self, token: &[u8; 32], now: Instant) -> Option<Verdict> {
        let (until, verdict) = self.by_token.get(token)?;
        (now < *until).then(|| verdict.clone())
    }

    /// Remembers a verdict (not [`Verdict::Unavailable`]) until `now +` [`REMEMBER_FOR`]; when
    /// full, forgets the expired ones, and if none expired, all.
    pub fn remember(&mut self, token: [u8; 32], verdict: Verdict, now: Instant) {
        if matches!(verdict, Verdict::Unavailable(_)) {
            return;
        }
        if self.by_token.len() >= MAX_REMEMBERED && !self.by_token.contains_key(&token) {
            self.by_token.retain(|_, (until, _)| now < *until);
            if self.by_token.len() >= MAX_REMEMBERED {
                self.by_token.clear();
            }
        }
        self.by_token.insert(token, (now + REMEMBER_FOR, verdict));
    }

    /// How many verdicts are held.
    pub fn len(&self) -> usize {
        self.by_token.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.by_token.is_empty()
    }
}

/// Checks requests to one path with the apiserver of `client`.
pub struct Access {
    client: kube::Client,
    path: String,
    verdicts: Mutex<Verdicts>,
}

impl Access {
    /// Checks access to `path` (e.g. `/metrics`) with the apiserver of `client`.
    pub fn new(client: kube::Client, path: &str) -> Self {
        Self {
            client,
            path: path.to_string(),
            verdicts: Mutex::new(Verdicts::default()),
        }
    }

    /// The verdict on a request with this `Authorization` header value.
    pub async fn verdict(&self, authorization: Option<&[u8]>) -> Verdict {
        let Some(token) = bearer_token(authorization) else {
            return Verdict::Unauthenticated(
                "a bearer token is required (Authorization: Bearer <token>)".into(),
            );
        };
        let digest = Verdicts::digest(token);
        let remembered = self.verdicts.lock().get(&digest, Instant::now());
        if let Some(verdict) = remembered {
            return verdict;
        }
        let verdict = self.ask(token).await;
        self.verdicts
            .lock()
            .remember(digest, verdict.clone(), Instant::now());
        verdict
    }

    async fn ask(&self, token: &str) -> Verdict {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..Default::default()
        };
        let reviewed = match Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
        {
            Ok(r) => r.status.unwrap_or_default(),
            Err(e) => {
                return Verdict::Unavailable(format!(
                    "cannot review the token: {}",
                    kubesync::error::describe_kube(&e)
                ));
            }
        };
        let user = match (reviewed.authenticated, reviewed.user) {
            (Some(true), Some(user)) => user,
            _ => {
                return Verdict::Unauthenticated(match reviewed.error {
                    Some(e) if !e.is_empty() => format!("the token is not valid: {e}"),
                    _ => "the token is not valid".into(),
                });
            }
        };
        let name = user.username.clone().unwrap_or_default();
        match Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access_review(&user, &self.path))
            .await
        {
            Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => Verdict::Allowed,
            Ok(_) => Verdict::Forbidden(format!(
                "{name:?} may not get {} (the ClusterRole kubesync-metrics-reader grants it)",
                self.path
            )),
            Err(e) => Verdict::Unavailable(format!(
                "cannot review access: {}",
                kubesync::error::describe_kube(&e)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_token_is_taken() {
        assert_eq!(bearer_token(Some(b"Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(Some(b"bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(Some(b"Basic abc")), None);
        assert_eq!(bearer_token(Some(b"Bearer ")), None);
        assert_eq!(bearer_token(Some(b"Bearer")), None);
        assert_eq!(bearer_token(Some(b"\xff\xfe")), None);
        assert_eq!(bearer_token(None), None);
    }

    #[test]
    fn the_review_asks_for_get_on_the_path_as_the_token_holder() {
        let user = UserInfo {
            username: Some("system:serviceaccount:monitoring:prometheus".into()),
            uid: Some("u-1".into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            extra: Some([("scope".to_string(), vec!["x".to_string()])].into()),
        };
        let review = access_review(&user, "/metrics");
        let spec = review.spec;
        assert_eq!(spec.user, user.username);
        assert_eq!(spec.uid, user.uid);
        assert_eq!(spec.groups, user.groups);
        assert_eq!(spec.extra, user.extra);
        assert!(spec.resource_attributes.is_none());
        let attrs = spec.non_resource_attributes.expect("non-resource");
        assert_eq!(attrs.path.as_deref(), Some("/metrics"));
        assert_eq!(attrs.verb.as_deref(), Some("get"));
    }

    #[test]
    fn verdicts_expire_and_stay_bounded_and_outages_are_not_remembered() {
        let now = Instant::now();
        let mut v = Verdicts::default();
        let a = Verdicts::digest("a");
        v.remember(a, Verdict::Allowed, now);
        assert_eq!(v.get(&a, now), Some(Verdict::Allowed));
        assert_eq!(v.get(&a, now + REMEMBER_FOR), None);
        let b = Verdicts::digest("b");
        v.remember(b, Verdict::Unavailable("down".into()), now);
        assert_eq!(v.get(&b, now), None);
        // Full of live verdicts: all are forgotten to make room (never more than the bound).
        for i in 0..(MAX_REMEMBERED * 3) {
            v.remember(
                Verdicts::digest(&i.to_string()),
                Verdict::Forbidden(String::new()),
                now,
            );
            assert!(v.len() <= MAX_REMEMBERED);
        }
        // Full with expired verdicts: those make room, and the live one stays.
        let mut v = Verdicts::default();
        for i in 0..MAX_REMEMBERED - 1 {
            v.remember(Verdicts::digest(&i.to_string()), Verdict::Allowed, now);
        }
        let later = now + REMEMBER_FOR / 2;
        v.remember(a, Verdict::Allowed, later);
        assert_eq!(v.len(), MAX_REMEMBERED);
        v.remember(b, Verdict::Allowed, now + REMEMBER_FOR);
        assert_eq!(v.len(), 2);
        assert_eq!(v.get(&a, now + REMEMBER_FOR), Some(Verdict::Allowed));
        assert!(!v.is_empty());
    }
}
