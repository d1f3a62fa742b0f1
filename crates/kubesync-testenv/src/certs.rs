//! The certificate authority, serving certificate and service-account key of one environment.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::Error;

/// PEM material written into an environment's directory.
pub(crate) struct Certs {
    pub ca_pem: String,
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    pub service_account_key_pem: String,
    pub service_account_pub_pem: String,
}

fn err(e: rcgen::Error) -> Error {
    Error::Certificates(e.to_string())
}

impl Certs {
    /// A fresh CA, a serving certificate for `127.0.0.1`/`localhost` signed by it, and an ECDSA
    /// key for signing service-account tokens.
    pub(crate) fn generate(cluster: &str) -> Result<Self, Error> {
        let ca_key = KeyPair::generate().map_err(err)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("kubesync-testenv-ca-{cluster}"));
        ca_params.distinguished_name = dn;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(err)?;

        let serving_key = KeyPair::generate().map_err(err)?;
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "kubernetes".to_string()])
                .map_err(err)?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::IpAddr::V4(
                std::net::Ipv4Addr::LOCALHOST,
            )));
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "kube-apiserver");
        params.distinguished_name = dn;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let serving = params.signed_by(&serving_key, &ca).map_err(err)?;

        let sa_key = KeyPair::generate().map_err(err)?;
        Ok(Self {
            ca_pem: ca.pem(),
            serving_cert_pem: serving.pem(),
            serving_key_pem: serving_key.serialize_pem(),
            service_account_key_pem: sa_key.serialize_pem(),
            service_account_pub_pem: sa_key.public_key_pem(),
        })
    }
}
