//! Manifests for tests and demos.

/// A namespaced demo CRD `widgets.demo.kubesync.io/v1` with spec, a status subresource
/// and printer columns; any fields are allowed in spec and status.
pub const WIDGET_CRD: &str = include_str!("../fixtures/widget-crd.yaml");
