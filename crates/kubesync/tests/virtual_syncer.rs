//! A virtual syncer on real control planes: namespaces in a target cluster exist exactly while
//! ConfigMaps in a source cluster ask for them.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::ApiResource;
use kubesync::Cluster;
use kubesync::runtime::Watch;
use kubesync::syncer::virtual_syncer::{NeedWatch, VirtualContext, VirtualEngine, VirtualSyncer};
use kubesync::translate::ObjectName;
use kubesync_testenv::eventually;

const NEEDS: &str = "example.kubesync.io/needs-namespace";
const FOR: &str = "example.kubesync.io/provisioned-for";

struct NamespaceProvisioner {
    source: Cluster,
    ns_type: ApiResource,
    cm_type: ApiResource,
    watch_ns: String,
}

impl VirtualSyncer for NamespaceProvisioner {
    fn target_resource(&self) -> &ApiResource {
        &self.ns_type
    }

    fn needs(&self) -> Vec<NeedWatch> {
        vec![NeedWatch {
            cluster: self.source.clone(),
            watch: Watch::of::<ConfigMap>().namespace(&self.watch_ns),
            mapper: Arc::new(|cm: &DynamicObject| {
                cm.labels()
                    .get(NEEDS)
                    .map(|n| ObjectName::cluster_scoped(n.clone()))
                    .into_iter()
                    .collect()
            }),
        }]
    }

    fn desired(&self, cx: &VirtualContext<'_>, name: &ObjectName) -> Option<DynamicObject> {
        let mut users: Vec<String> = cx
            .ctx
            .list(self.source.name(), &self.cm_type)
            .iter()
            .filter(|cm| cm.labels().get(NEEDS) == Some(&name.name))
            .map(|cm| cm.name_any())
            .collect();
        if users.is_empty() {
            return None;
        }
        users.sort();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name.name, "annotations": {FOR: users.join(",")}},
        }))
        .ok()
    }

    fn is_owned(&self, target: &DynamicObject) -> bool {
        target.annotations().contains_key(FOR)
    }
}

#[tokio::test]
async fn needed_objects_are_created_updated_and_removed_and_foreign_ones_left_alone() {
    init_tracing();
    let (src, dst) = (shared("virt-src"), shared("virt-dst"));
    let ns = unique_ns("needs");
    src.create_namespace(&ns).await.expect("ns");
    let want = format!("{ns}-provisioned");
    let foreign = format!("{ns}-foreign");
    dst.create_namespace(&foreign).await.expect("foreign ns");
    let engine = || {
        VirtualEngine::new(
            NamespaceProvisioner {
                source: cluster(src),
                ns_type: ApiResource::erase::<Namespace>(&()),
                cm_type: ApiResource::erase::<ConfigMap>(&()),
                watch_ns: ns.clone(),
            },
            cluster(dst),
        )
    };
    let run = || {
        let engine = engine();
        let writes = engine.write_counter();
        let (controller, reconciler) = engine.into_parts().expect("parts");
        let (reconciler, reconciled) = observed(reconciler);
        (start(controller, reconciler), reconciled, writes)
    };
    let (running, _, _) = run();
    let namespaces: Api<Namespace> = Api::all(dst.client().expect("client"));
    let cms: Api<ConfigMap> = Api::namespaced(src.client().expect("client"), &ns);
    let t = Duration::from_secs(30);

    apply_cm(src, &configmap(&ns, "a", &[(NEEDS, &want)], &[])).await;
    apply_cm(src, &configmap(&ns, "b", &[(NEEDS, &want)], &[])).await;
    apply_cm(src, &configmap(&ns, "c", &[(NEEDS, &foreign)], &[])).await;
    eventually("created for a and b", t, || async {
        namespaces
            .get_opt(&want)
            .await
            .expect("get")
            .filter(|n| n.annotations().get(FOR).map(String::as_str) == Some("a,b"))
    })
    .await;
    // Zero writes when in sync: restarted, the engine decides on the provisioned namespace
    // (and the foreign one) and writes nothing.
    running.stop().await;
    let began = std::time::Instant::now();
    let (running, mut reconciled, writes) = run();
    reconciled.after_start(&want, began).await;
    reconciled.after_start(&foreign, began).await;
    assert_eq!(writes.writes(), 0, "an in-sync restart writes nothing");
    cms.delete("a", &DeleteParams::default())
        .await
        .expect("delete a");
    eventually("updated to b", t, || async {
        namespaces
            .get_opt(&want)
            .await
            .expect("get")
            .filter(|n| n.annotations().get(FOR).map(String::as_str) == Some("b"))
    })
    .await;
    cms.delete("b", &DeleteParams::default())
        .await
        .expect("delete b");
    eventually("removed when nothing needs it", t, || async {
        namespaces
            .get_opt(&want)
            .await
            .expect("get")
            .is_none_or(|n| n.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    let c = key_of(src, &ApiResource::erase::<ConfigMap>(&()), &ns, "c");
    let c_gone = Change::gone(reconciled.follow(c));
    cms.delete("c", &DeleteParams::default())
        .await
        .expect("delete c");
    // Witness: the target that c needed was reconciled on a store without c, and left alone.
    reconciled.saw(&foreign, &[&c_gone]).await;
    let f = namespaces
        .get(&foreign)
        .await
        .expect("foreign namespace survives");
    assert!(f.metadata.deletion_timestamp.is_none());
    assert!(
        !f.annotations().contains_key(FOR),
        "a foreign object is never adopted"
    );
    running.stop().await;
}
