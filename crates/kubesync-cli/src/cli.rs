//! Command-line interface: argument parsing, logging set-up and the commands.
//!
//! - `kubesync run`: the operator;
//! - `kubesync crds`: print the CRDs;
//! - `kubesync check`: reachability and version of clusters, with a warning for a version
//!   outside the supported range.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kubesync::Cluster;

mod run;

/// kubesync keeps Kubernetes objects in sync between namespaces and clusters.
#[derive(Debug, Parser)]
#[command(name = "kubesync", version, about)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "KUBESYNC_LOG_FORMAT", global = true)]
    log_format: LogFormat,
    /// Log filter (tracing env-filter syntax), e.g. `info,kubesync=debug`.
    #[arg(long, default_value = "info", env = "RUST_LOG", global = true)]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the operator: reconciles ObjectSync, ClusterObjectSync, RemoteCluster and
    /// ResourceSync objects in this cluster (in-cluster config, or --kubeconfig/--context),
    /// honouring SyncGrants, and serves the probes and /metrics, until SIGTERM or Ctrl-C.
    Run(Box<RunArgs>),
    /// Prints the CustomResourceDefinitions (YAML) of kubesync's resources.
    Crds,
    /// Connects to clusters and reports each one's reachability and version, warning about a
    /// version outside the supported range (v1.33 to v1.37). Fails when a cluster does not
    /// answer; a warning alone does not fail it.
    Check {
        /// Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Contexts to check (repeatable; default: the current context).
        #[arg(long = "context")]
        contexts: Vec<String>,
        /// Give up on a cluster after this many seconds.
        #[arg(long, default_value_t = 10)]
        timeout: u64,
        /// Check the RemoteClusters of the cluster (the one context given, or the current
        /// one) instead: each connected with its kubeconfig Secret, what it serves as (a
        /// source: `spec.source.cluster`; a destination), and for a source whether its
        /// credentials may get, list and watch each kind pulled from it (and warn when they
        /// may also write it). Fails when one does not answer or may not read.
        #[arg(long)]
        remote_clusters: bool,
    },
    /// The syncs that reflector's and kubernetes-replicator's annotations declare (what
    /// `kubesync run --compat` honours).
    Compat {
        #[command(subcommand)]
        command: CompatCommand,
    },
}

#[derive(Debug, Subcommand)]
enum CompatCommand {
    /// Prints every sync the annotations declare in a cluster with its state (a push: how
    /// many of the namespaces it selects hold its copy, and where someone else's object
    /// stands; a pull: whether its source exists and consents); with --as-objectsync, the
    /// ObjectSyncs that declare the same pushes instead. Reads only.
    List {
        /// Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Kubeconfig context.
        #[arg(long)]
        context: Option<String>,
        /// Whose annotations (repeatable; default: both).
        #[arg(long = "compat", value_enum)]
        tools: Vec<crate::compat::Tool>,
        /// Print ObjectSync YAML for each push instead of the table.
        #[arg(long)]
        as_objectsync: bool,
    },
}

/// The flags of `kubesync run`.
#[derive(Debug, Args)]
struct RunArgs {
    /// Kubeconfig file (default: in-cluster config, else $KUBECONFIG or ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long)]
    context: Option<String>,
    /// ObjectSync: namespaces (names or globs) any ObjectSync may copy from, besides its
    /// own (repeatable).
    #[arg(long = "allow-source-namespace")]
    source_namespaces: Vec<String>,
    /// ObjectSync: namespaces of RemoteClusters any ObjectSync may read its source from
    /// (`spec.source.cluster`), besides the namespace of its own name there, as
    /// `<RemoteCluster>/<namespace>` (names or globs, e.g. `hub/shared-*`; repeatable).
    #[arg(long = "allow-remote-source-namespace", value_parser = remote_source_namespace)]
    remote_source_namespaces: Vec<String>,
    /// ObjectSync: only these destination namespaces (names or globs; repeatable).
    #[arg(long = "allow-destination-namespace")]
    allow_destination_namespaces: Vec<String>,
    /// ObjectSync: never these destination namespaces (names or globs; repeatable).
    #[arg(long = "deny-destination-namespace")]
    deny_destination_namespaces: Vec<String>,
    /// ObjectSync: only these kinds, as `Kind` (core) or `Kind.group` (repeatable).
    #[arg(long = "allowed-resource")]
    allowed_resources: Vec<String>,
    /// ObjectSync: namespaces (names or globs) whose ObjectSyncs write wherever the other
    /// rules allow, without the destinations' SyncGrants (repeatable; the operator's own
    /// namespace, $POD_NAMESPACE, always is).
    #[arg(long = "trusted-namespace")]
    trusted_namespaces: Vec<String>,
    /// ObjectSync: kinds a SyncGrant must name to admit them even where they would be
    /// default-grantable (`Kind` or `Kind.group`; repeatable).
    #[arg(long = "privileged-resource")]
    privileged_resources: Vec<String>,
    /// ObjectSync: kinds, besides ConfigMaps and Secrets that are not service-account tokens,
    /// that ObjectSyncs outside the trusted namespaces may copy into their own namespace and
    /// under SyncGrants that name no kinds (`Kind` or `Kind.group`; repeatable). Every other
    /// kind needs a SyncGrant that names it.
    #[arg(long = "grantable-resource")]
    grantable_resources: Vec<String>,
    /// ObjectSync: at most this many copies per ObjectSync outside the trusted namespaces;
    /// one that would make more writes nothing and says so.
    #[arg(long = "max-copies-per-declaration", default_value_t = crate::policy::DEFAULT_MAX_COPIES)]
    max_copies: usize,
    /// ObjectSync: the ServiceAccount (a name, of the ObjectSync's own namespace) that
    /// ObjectSyncs outside the trusted namespaces act as when their `spec.serviceAccountName`
    /// names none: their source is read and their copies written as it, so RBAC decides.
    /// Unset: such an ObjectSync is refused (`ServiceAccountRequired`).
    #[arg(long = "default-service-account", value_parser = service_account_name)]
    default_service_account: Option<String>,
    /// Address of the probes `/healthz` (liveness) and `/readyz` (readiness), plain HTTP;
    /// `none` turns them off.
    #[arg(
        long,
        default_value = "0.0.0.0:8080",
        env = "KUBESYNC_TELEMETRY_ADDRESS"
    )]
    telemetry_address: String,
    /// Address of `/metrics` (Prometheus), served over HTTPS to bearer tokens the apiserver
    /// allows to `get` `/metrics` (ClusterRole `kubesync-metrics-reader`); `none` turns it off.
    #[arg(long, default_value = "0.0.0.0:8443", env = "KUBESYNC_METRICS_ADDRESS")]
    metrics_address: String,
    /// Serve `/metrics` over plain HTTP without authentication (for loopback and demos); it
    /// may then share `--telemetry-address`.
    #[arg(long, env = "KUBESYNC_METRICS_INSECURE")]
    metrics_insecure: bool,
    /// Directory of the metrics certificate (`tls.crt`, `tls.key`, e.g. a mounted
    /// `kubernetes.io/tls` Secret), read again when it changes; without it a self-signed
    /// certificate is made at start.
    #[arg(long, env = "KUBESYNC_METRICS_CERT_DIR")]
    metrics_cert_dir: Option<PathBuf>,
    /// Run as one of several replicas: only the holder of a Lease works, the others wait
    /// to take over.
    #[arg(long, conflicts_with = "sharded")]
    leader_elect: bool,
    /// Run as one of several replicas that all work, each on its share: ObjectSyncs,
    /// ClusterObjectSyncs and RemoteClusters (with their ResourceSyncs) are spread over the
    /// live replicas, which hold member Leases (see the book's "Scale out" page).
    #[arg(long)]
    sharded: bool,
    /// Namespace of the member Leases with --sharded (default: $POD_NAMESPACE, else
    /// `default`).
    #[arg(long)]
    shard_namespace: Option<String>,
    /// This replica's name among the others (leader election, member Leases): unique among
    /// the live replicas (default: $POD_NAME, else the host name, and the process id).
    #[arg(long, env = "KUBESYNC_IDENTITY")]
    identity: Option<String>,
    /// Name of the group of replicas that share the work with --sharded (their member Leases
    /// carry it in the label `kubesync.io/member-of`).
    #[arg(long, default_value = "kubesync")]
    shard_group: String,
    /// Namespace of the leader Lease (default: $POD_NAMESPACE, else `default`).
    #[arg(long)]
    leader_election_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(long, default_value = "kubesync")]
    leader_election_name: String,
    /// How watches fetch their initial state, in the local cluster and every RemoteCluster:
    /// `auto` (streaming lists where the apiserver serves them, else list+watch; watches of
    /// metadata only list in pages either way), `list-watch` or `streaming-list` (every watch
    /// streams).
    #[arg(long, default_value = "auto", env = "KUBESYNC_LIST_STRATEGY", value_parser = parse_list_strategy)]
    list_strategy: kubesync::cluster::ListStrategy,
    /// Honour another copier's annotations on Secrets, ConfigMaps (and, for `replicator`,
    /// Roles, RoleBindings and ServiceAccounts) as implicit declarations: `reflector`
    /// (emberstack) or `replicator` (mittwald); repeatable. Off by default.
    #[arg(long = "compat", value_enum)]
    compat: Vec<crate::compat::Tool>,
    /// With --compat: write a copy or a pull only when its source changed since it was
    /// written, as those tools do (a change made to a copy stays until then). Off by default:
    /// copies are repaired.
    #[arg(long)]
    compat_version_gate: bool,
    /// Seconds after SIGTERM (or Ctrl-C) by which the process has exited: it hands its Lease
    /// over and stops, and if that cannot finish in time (an apiserver that is gone), it exits
    /// anyway (code 1). Keep it under the Pod's terminationGracePeriodSeconds (the chart's: 30).
    #[arg(long, default_value_t = 8, env = "KUBESYNC_SHUTDOWN_TIMEOUT", value_parser = clap::value_parser!(u64).range(1..=3600))]
    shutdown_timeout: u64,
}

/// The reference of every command and flag, as Markdown, generated from the command line's
/// own definitions (`docs/src/reference/flags.md`; a test keeps the committed page equal to
/// this).
pub fn flags_reference() -> String {
    use clap::CommandFactory;
    let cli = Cli::command();
    let mut out = String::from(
        "# Flags\n\n<!-- Generated from the command line's definitions: `make reference` writes this page, and a test fails when it differs. -->\n\n",
    );
    out.push_str("## Global flags\n\n");
    flags_table(
        &mut out,
        cli.get_arguments().filter(|a| a.is_global_set()).collect(),
    );
    for sub in cli.get_subcommands() {
        out.push_str(&format!("\n## `kubesync {}`\n\n", sub.get_name()));
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            out.push_str(&one_line(about.to_string()));
            out.push_str(".\n\n");
        }
        let args: Vec<&clap::Arg> = sub
            .get_arguments()
            .filter(|a| !a.is_global_set() && a.get_long().is_some())
            .collect();
        if args.is_empty() {
            out.push_str("No flags but the global ones.\n");
        } else {
            flags_table(&mut out, args);
        }
    }
    out
}

/// `text` on one line: its words joined by single spaces.
fn one_line(text: String) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Appends to `out` the Markdown table of `args` (those with a long name): the flag with its
/// value, its environment variable, its default and its meaning.
fn flags_table(out: &mut String, args: Vec<&clap::Arg>) {
    out.push_str("| flag | environment | default | meaning |\n| --- | --- | --- | --- |\n");
    for arg in args {
        let Some(long) = arg.get_long() else { continue };
        let value = match arg.get_action() {
            clap::ArgAction::SetTrue | clap::ArgAction::SetFalse => String::new(),
            _ => arg
                .get_value_names()
                .and_then(|n| n.first())
                .map(|n| format!(" {n}"))
                .unwrap_or_else(|| format!(" {}", long.to_uppercase().replace('-', "_"))),
        };
        let env = arg
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|d| format!("`{}`", d.to_string_lossy()))
            .collect();
        let help = flag_meaning(arg);
        out.push_str(&format!(
            "| `--{long}{value}` | {env} | {} | {} |\n",
            default.join(", "),
            help.replace('|', "\\|")
        ));
    }
}

/// The meaning of `arg` in its table: its help on one line, ending in a period, then the
/// values it takes (unless it is a switch) and, when it may be repeated and its help does not
/// say so, "Repeatable.".
fn flag_meaning(arg: &clap::Arg) -> String {
    let mut help = one_line(
        arg.get_long_help()
            .or(arg.get_help())
            .map(ToString::to_string)
            .unwrap_or_default(),
    );
    if !help.is_empty() && !help.ends_with('.') {
        help.push('.');
    }
    let flag = matches!(
        arg.get_action(),
        clap::ArgAction::SetTrue | clap::ArgAction::SetFalse
    );
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !values.is_empty() && !flag {
        help.push_str(&format!(" One of {}.", values.join(", ")));
    }
    if matches!(arg.get_action(), clap::ArgAction::Append)
        && !help.to_lowercase().contains("repeatable")
    {
        help.push_str(" Repeatable.");
    }
    help
}

fn parse_list_strategy(text: &str) -> Result<kubesync::cluster::ListStrategy, String> {
    kubesync::cluster::ListStrategy::parse(text)
        .ok_or_else(|| format!("{text:?} is not auto, list-watch or streaming-list"))
}

/// Parses the command line and runs the command.
pub async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format, &cli.log);
    match cli.command {
        Command::Run(args) => run::command(*args).await,
        Command::Crds => match crate::crd::crds_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("kubesync: cannot render the CRDs: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Check {
            kubeconfig,
            contexts,
            timeout,
            remote_clusters: true,
        } => check_remote_clusters(kubeconfig, contexts, Duration::from_secs(timeout)).await,
        Command::Check {
            kubeconfig,
            contexts,
            timeout,
            remote_clusters: false,
        } => check(kubeconfig, contexts, Duration::from_secs(timeout)).await,
        Command::Compat {
            command:
                CompatCommand::List {
                    kubeconfig,
                    context,
                    tools,
                    as_objectsync,
                },
        } => compat_list(kubeconfig, context, tools, as_objectsync).await,
    }
}

async fn compat_list(
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    tools: Vec<crate::compat::Tool>,
    as_objectsync: bool,
) -> ExitCode {
    use crate::compat::{Tool, list};
    let tools = match tools.is_empty() {
        true => vec![Tool::Reflector, Tool::Replicator],
        false => tools,
    };
    let cluster = match load(&kubeconfig, context.as_deref()).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kubesync: cannot connect: {e}");
            return ExitCode::FAILURE;
        }
    };
    match list::gather(cluster.client(), &tools).await {
        Ok(facts) if as_objectsync => print!("{}", list::objectsyncs(&facts, &tools)),
        Ok(facts) => print!("{}", list::table(&list::rows(&facts, &tools))),
        Err(e) => {
            eprintln!(
                "kubesync: cannot list: {}",
                kubesync::error::describe_kube(&e)
            );
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn init_logging(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn load(kubeconfig: &Option<PathBuf>, context: Option<&str>) -> kubesync::Result<Cluster> {
    match (kubeconfig, context) {
        (Some(path), ctx) => Cluster::from_kubeconfig_file(path, ctx).await,
        (None, Some(ctx)) => Cluster::from_context(ctx).await,
        (None, None) => {
            let kc = kube::config::Kubeconfig::read()
                .map_err(|e| kubesync::Error::Kubeconfig(e.to_string()))?;
            Cluster::from_kubeconfig(kc, None, None).await
        }
    }
}

/// An `--allow-remote-source-namespace` entry: `<RemoteCluster>/<namespace>`, both parts
/// given.
fn remote_source_namespace(entry: &str) -> Result<String, String> {
    match entry.split_once('/') {
        Some((c, ns)) if !c.is_empty() && !ns.is_empty() && !ns.contains('/') => {
            Ok(entry.to_string())
        }
        _ => Err(format!(
            "{entry:?}: give <RemoteCluster>/<namespace>, each a name or a glob (e.g. hub/shared-*)"
        )),
    }
}

/// A ServiceAccount's name (a DNS subdomain), as `--default-service-account` takes it.
fn service_account_name(name: &str) -> Result<String, String> {
    if kubesync::validate::is_dns_subdomain(name) {
        Ok(name.to_string())
    } else {
        Err(format!(
            "{name:?} is not a ServiceAccount name (lowercase letters, digits, '-' and '.', at most 253)"
        ))
    }
}

/// `kubesync check --remote-clusters`: the RemoteClusters of one cluster.
async fn check_remote_clusters(
    kubeconfig: Option<PathBuf>,
    contexts: Vec<String>,
    timeout: Duration,
) -> ExitCode {
    if contexts.len() > 1 {
        eprintln!(
            "kubesync: --remote-clusters checks one cluster's RemoteClusters: give at most one --context"
        );
        return ExitCode::FAILURE;
    }
    let checked = match load(&kubeconfig, contexts.first().map(String::as_str)).await {
        Ok(local) => crate::remote_check::check(&local, timeout).await,
        Err(e) => Err(e),
    };
    match checked {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("kubesync: {}: {}", e.category(), kubesync::error::chain(&e));
            ExitCode::FAILURE
        }
    }
}

async fn check(kubeconfig: Option<PathBuf>, contexts: Vec<String>, timeout: Duration) -> ExitCode {
    let targets: Vec<Option<String>> = if contexts.is_empty() {
        vec![None]
    } else {
        contexts.into_iter().map(Some).collect()
    };
    let mut failed = false;
    for ctx in targets {
        let label = ctx.clone().unwrap_or_else(|| "(current context)".into());
        let result = match load(&kubeconfig, ctx.as_deref()).await {
            Ok(cluster) => match tokio::time::timeout(timeout, cluster.server_version()).await {
                Ok(Ok(version)) => Ok((cluster.name().to_string(), version)),
                Ok(Err(e)) => Err(format!("{}: {}", e.category(), kubesync::error::chain(&e))),
                Err(_) => Err(format!("Unreachable: no answer within {timeout:?}")),
            },
            Err(e) => Err(format!("{}: {e}", e.category())),
        };
        match result {
            Ok((name, version)) => match kubesync::version::support(&version).warning() {
                None => println!("{name}\tready\t{version}"),
                Some(warning) => println!("{name}\tready\t{version}\twarning: {warning}"),
            },
            Err(msg) => {
                failed = true;
                println!("{label}\terror\t{msg}");
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_valid() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn sharding_and_leader_election_exclude_each_other() {
        assert!(Cli::try_parse_from(["kubesync", "run", "--sharded"]).is_ok());
        let err = Cli::try_parse_from(["kubesync", "run", "--sharded", "--leader-elect"])
            .expect_err("both")
            .to_string();
        assert!(err.contains("--sharded"), "{err}");
    }

    #[test]
    fn a_remote_source_namespace_names_a_cluster_and_a_namespace() {
        let run = |entry: &str| {
            Cli::try_parse_from(["kubesync", "run", "--allow-remote-source-namespace", entry])
        };
        assert!(run("hub/shared-*").is_ok());
        assert!(run("*/certificates").is_ok());
        for bad in ["shared", "hub/", "/shared", "hub/a/b"] {
            let err = run(bad).expect_err(bad).to_string();
            assert!(err.contains("<RemoteCluster>/<namespace>"), "{bad}: {err}");
        }
    }

    #[test]
    fn parses_repeated_contexts() {
        let cli = Cli::try_parse_from(["kubesync", "check", "--context", "a", "--context", "b"])
            .expect("parse");
        match cli.command {
            Command::Check { contexts, .. } => assert_eq!(contexts, ["a", "b"]),
            other => panic!("parsed as {other:?}"),
        }
    }
}
