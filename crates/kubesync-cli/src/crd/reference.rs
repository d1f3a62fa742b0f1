//! The book's reference of every CRD field, generated from the CRDs' schemas (pure): what the
//! apiserver checks is what the page says. `make reference` writes
//! `docs/src/reference/crd-fields.md`, and a test fails when the committed page differs.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

/// The page: per kind, its scope and version, a table of every field (path, type, what the
/// apiserver requires of it, description) and the CEL rules checked at admission.
pub fn fields_reference() -> String {
    let mut out = String::from(
        "# CRD fields\n\n<!-- Generated from the CRDs' schemas (`kubesync crds`): `make reference` writes this page, and a test fails when it differs. -->\n\nEvery field of every kubesync resource, as the apiserver checks it. `metadata` is the\nusual object metadata; status fields are written by kubesync only.\n",
    );
    for crd in super::crds() {
        kind_section(&mut out, &crd);
    }
    out
}

fn kind_section(out: &mut String, crd: &CustomResourceDefinition) {
    let spec = &crd.spec;
    let Some(version) = spec.versions.iter().find(|v| v.storage) else {
        return;
    };
    out.push_str(&format!(
        "\n## {}\n\n`{}/{}`, {}.\n\n",
        spec.names.kind,
        spec.group,
        version.name,
        match spec.scope.as_str() {
            "Namespaced" => "namespaced",
            _ => "cluster-scoped",
        }
    ));
    let Some(schema) = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
    else {
        return;
    };
    let mut rows = Vec::new();
    let mut rules = Vec::new();
    for (name, field) in properties(schema) {
        if ["apiVersion", "kind", "metadata"].contains(&name.as_str()) {
            continue;
        }
        walk(
            &name,
            field,
            is_required(schema, &name),
            &mut rows,
            &mut rules,
        );
    }
    out.push_str("| field | type | rules | description |\n| --- | --- | --- | --- |\n");
    for row in rows {
        out.push_str(&row);
    }
    if !rules.is_empty() {
        out.push_str(
            "\nChecked at admission (CEL):\n\n| on | rule | message |\n| --- | --- | --- |\n",
        );
        for (path, rule, message) in rules {
            out.push_str(&format!(
                "| `{path}` | `{}` | {} |\n",
                cell(&rule).replace('`', "'"),
                cell(&message)
            ));
        }
    }
}

/// Adds the row of the field at `path`, then its children's (an array's items as `path[]`, a
/// map's values as `path.<key>`).
fn walk(
    path: &str,
    field: &JSONSchemaProps,
    required: bool,
    rows: &mut Vec<String>,
    rules: &mut Vec<(String, String, String)>,
) {
    let mut checks = Vec::new();
    if required {
        checks.push("required".to_string());
    }
    checks.extend(constraints(field));
    rows.push(format!(
        "| `{path}` | {} | {} | {} |\n",
        type_of(field),
        checks.join("; "),
        cell(field.description.as_deref().unwrap_or(""))
    ));
    for rule in field.x_kubernetes_validations.iter().flatten() {
        rules.push((
            path.to_string(),
            rule.rule.clone(),
            rule.message.clone().unwrap_or_default(),
        ));
    }
    for (name, child) in properties(field) {
        let required = is_required(field, &name);
        walk(&format!("{path}.{name}"), child, required, rows, rules);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = &field.items
        && !properties(items).is_empty()
    {
        for (name, child) in properties(items) {
            let required = is_required(items, &name);
            walk(&format!("{path}[].{name}"), child, required, rows, rules);
        }
        for rule in items.x_kubernetes_validations.iter().flatten() {
            rules.push((
                format!("{path}[]"),
                rule.rule.clone(),
                rule.message.clone().unwrap_or_default(),
            ));
        }
    }
}

fn properties(field: &JSONSchemaProps) -> BTreeMap<String, &JSONSchemaProps> {
    field
        .properties
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v))
        .collect()
}

fn is_required(parent: &JSONSchemaProps, name: &str) -> bool {
    parent.required.iter().flatten().any(|r| r == name)
}

/// The field's type: `string`, `integer`, `boolean`, `object`, `[]T` for an array of `T`,
/// `map[string]T` for a map.
fn type_of(field: &JSONSchemaProps) -> String {
    if field.x_kubernetes_int_or_string == Some(true) {
        return "integer or string".into();
    }
    match field.type_.as_deref() {
        Some("array") => match &field.items {
            Some(JSONSchemaPropsOrArray::Schema(items)) => format!("[]{}", type_of(items)),
            _ => "[]".into(),
        },
        Some("object") => match &field.additional_properties {
            Some(JSONSchemaPropsOrBool::Schema(values)) => {
                format!("map[string]{}", type_of(values))
            }
            _ if field.x_kubernetes_preserve_unknown_fields == Some(true) => "any object".into(),
            _ => "object".into(),
        },
        Some(t) => match field.format.as_deref() {
            Some(f) => format!("{t} ({f})"),
            None => t.into(),
        },
        None if field.x_kubernetes_preserve_unknown_fields == Some(true) => "any".into(),
        None => "any".into(),
    }
}

/// What the apiserver requires of the field's value besides its type.
fn constraints(field: &JSONSchemaProps) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(values) = &field.enum_ {
        let values: Vec<String> = values
            .iter()
            .map(|v| match v.0.as_str() {
                Some(s) => format!("`{s}`"),
                None => format!("`{}`", v.0),
            })
            .collect();
        out.push(format!("one of {}", values.join(", ")));
    }
    if let Some(d) = &field.default {
        out.push(format!("default `{}`", d.0));
    }
    if let Some(n) = field.min_length {
        out.push(format!(
            "at least {n} character{}",
            if n == 1 { "" } else { "s" }
        ));
    }
    if let Some(n) = field.max_length {
        out.push(format!("at most {n} characters"));
    }
    if let Some(n) = field.min_items {
        out.push(format!("at least {n} items"));
    }
    if let Some(n) = field.max_items {
        out.push(format!("at most {n} items"));
    }
    if let Some(n) = field.max_properties {
        out.push(format!("at most {n} entries"));
    }
    if let Some(n) = field.minimum {
        out.push(format!("≥ {n}"));
    }
    if let Some(n) = field.maximum {
        out.push(format!("≤ {n}"));
    }
    if let Some(p) = &field.pattern {
        out.push(format!("matches `{}`", p.replace('|', "\\|")));
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = &field.items {
        let inner = constraints(items);
        if !inner.is_empty() {
            out.push(format!("each: {}", inner.join(", ")));
        }
    }
    if let Some(JSONSchemaPropsOrBool::Schema(values)) = &field.additional_properties {
        let inner = constraints(values);
        if !inner.is_empty() {
            out.push(format!("each value: {}", inner.join(", ")));
        }
    }
    out
}

/// Text that fits one table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_of_every_kind_is_on_the_page_with_its_rules() {
        let page = fields_reference();
        for kind in [
            "ObjectSync",
            "ClusterObjectSync",
            "RemoteCluster",
            "ResourceSync",
            "SyncGrant",
        ] {
            assert!(page.contains(&format!("\n## {kind}\n")), "{kind}");
        }
        // Nested, array and map fields, with what the apiserver requires of them.
        for row in [
            "| `spec.source.kind` | string | required;",
            "| `spec.destinations` | []object | required; at most 100 items |",
            "| `spec.destinations[].namespace` | string |",
            "| `spec.kubeconfigSecretRef.name` | string | required;",
            "| `spec.deletionPolicy` | string | one of `Delete`, `Orphan`",
        ] {
            assert!(page.contains(row), "{row} missing:\n{page}");
        }
        // The CEL rules, with their messages.
        assert!(page.contains("Checked at admission (CEL)"));
        // Every row of a table has as many cells as its header (pipes in text are escaped).
        let cells = |line: &str| line.replace("\\|", "").matches('|').count();
        let mut header = None;
        for line in page.lines() {
            match (line.starts_with('|'), header) {
                (true, None) => header = Some(cells(line)),
                (true, Some(n)) => assert_eq!(cells(line), n, "{line}"),
                (false, _) => header = None,
            }
        }
    }
}
