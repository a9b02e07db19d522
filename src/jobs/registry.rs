//! The registry of jobs: every job's config type, listed once ([`each_kind`]), and what
//! is derived from that list without naming a type — [`JobConfig`] (a config of any
//! job), [`JobConfig::from_options`] (Python's keyword arguments), [`build`] (a job
//! for batches), and on the command line one subcommand per job
//! (`cli::job::JobCommand`, whose flags are the config's, its files' and its
//! device's). Every subcommand runs through [`run`]. docs/architecture.md, "Adding a
//! scorer".

use std::any::Any;

use anyhow::Result;

use super::{
    beam, classify, device, embed, label, lepus, loglik, report::Report, rerank, retrieve, review,
    DeviceConfig, Job, Pooled, WithInputs,
};
use crate::backend::Backend;
use crate::io::paths::Named;
use crate::options::{self, OptionMap, Options};
use crate::pipeline::files::{self, FileJob, FileRun, RunSummary};

/// Calls `v` with every registered job's config type, in the order `hopscore --help`
/// lists the subcommands: the one list of the jobs.
pub fn each_kind(v: &mut impl Kinds) {
    v.kind::<beam::BeamConfig>();
    v.kind::<label::LabelConfig>();
    v.kind::<review::ReviewConfig>();
    v.kind::<lepus::LepusConfig>();
    v.kind::<lepus::instruction_search::InstructionSearchConfig>();
    v.kind::<rerank::RerankConfig>();
    v.kind::<classify::ClassifyConfig>();
    v.kind::<embed::EmbedConfig>();
    v.kind::<retrieve::RetrieveConfig>();
    v.kind::<loglik::LoglikConfig>();
}

/// A visitor of the registered jobs' config types ([`each_kind`]).
pub trait Kinds {
    fn kind<C: Registered>(&mut self);
}

/// A call on the config type of one job ([`with_kind`]).
pub trait KindFn {
    type Out;
    fn call<C: Registered>(self) -> Self::Out;
}

/// The names of the jobs, in registry order.
pub fn names() -> Vec<&'static str> {
    struct Names(Vec<&'static str>);
    impl Kinds for Names {
        fn kind<C: Registered>(&mut self) {
            self.0.push(C::NAME);
        }
    }
    let mut names = Names(Vec::new());
    each_kind(&mut names);
    names.0
}

/// `f` called on the config type of the job `name`; an unknown name is refused with
/// the list of jobs.
pub fn with_kind<F: KindFn>(name: &str, f: F) -> Result<F::Out> {
    struct Find<'a, F: KindFn> {
        name: &'a str,
        f: Option<F>,
        out: Option<F::Out>,
    }
    impl<F: KindFn> Kinds for Find<'_, F> {
        fn kind<C: Registered>(&mut self) {
            if C::NAME == self.name {
                self.out = self.f.take().map(F::call::<C>);
            }
        }
    }
    let mut find = Find {
        name,
        f: Some(f),
        out: None,
    };
    each_kind(&mut find);
    find.out
        .ok_or_else(|| anyhow::anyhow!("`{name}` is not a job: use one of {}", names().join(", ")))
}

/// `clap::Args` on the command line (feature `cli`); nothing without it. What a job's
/// config, files and device options must be for its subcommand.
#[cfg(feature = "cli")]
pub trait CliArgs: clap::Args {}
#[cfg(feature = "cli")]
impl<T: clap::Args> CliArgs for T {}
/// `clap::Args` on the command line (feature `cli`); nothing without it.
#[cfg(not(feature = "cli"))]
pub trait CliArgs {}
#[cfg(not(feature = "cli"))]
impl<T> CliArgs for T {}

/// A job's config as the registry and the runs need it: its options ([`Options`]:
/// defaults, checks, model paths, input files), its name and help line, the files and
/// device options of its subcommand, and what a run returns.
pub trait JobKind:
    Options
    + serde::Serialize
    + serde::de::DeserializeOwned
    + CliArgs
    + std::fmt::Debug
    + Clone
    + Send
    + 'static
{
    /// The job's name: its subcommand, and `command` in [`JobConfig::from_options`].
    const NAME: &'static str;
    /// The subcommand's help line.
    const ABOUT: &'static str;
    /// The options without a default (the paths of its models).
    const REQUIRED: &'static [&'static str];
    /// What an input row is, for summaries: `question` or `row`.
    const ROW: &'static str;
    /// The device options of the job's command: [`DeviceConfig`], or
    /// [`super::NoDevice`] for a job that runs no model.
    type Device: Into<DeviceConfig> + CliArgs + std::fmt::Debug + Clone + Send + 'static;
    /// The files a run reads and writes: [`FileRun`] for a job over rows.
    type Files: Files + CliArgs + std::fmt::Debug + Clone + Send + 'static;
    /// What a run over files returns (and says when it ends).
    type Summary: Report;
    /// Whether the job runs a model: a job that runs none ([`super::NoDevice`]) takes
    /// no device options and records no device settings.
    const RUNS_MODEL: bool = true;
    /// What a run records of `device` ([`super::device_settings`]; a job that runs no
    /// model, none).
    fn device_settings(device: &DeviceConfig) -> Result<Vec<(String, String)>> {
        match Self::RUNS_MODEL {
            true => super::device_settings(device),
            false => Ok(Vec::new()),
        }
    }
}

/// The files of a run, before it starts: told the job's other input files and the
/// device settings, they refuse an output that is or holds an input.
pub trait Files {
    fn prepare(&mut self, inputs: Vec<Named>, settings: Vec<(String, String)>) -> Result<()>;
}

impl Files for FileRun {
    fn prepare(&mut self, inputs: Vec<Named>, settings: Vec<(String, String)>) -> Result<()> {
        self.inputs = inputs;
        self.settings = settings;
        self.check_paths(&[])
    }
}

/// What the registry needs of a job: how it loads for batches and how it runs over
/// its files. A job over rows gets both from [`FileJobKind`].
pub trait Registered: JobKind {
    /// Loads the job on `be`, for batches.
    fn load<B: Backend + 'static>(self, be: B) -> Result<Box<dyn Job>>;
    /// Loads the job on `device` and runs it over `files` (Ctrl-C and SIGTERM stop it:
    /// [`crate::stop::INTERRUPTED`]).
    fn run_files(self, device: &DeviceConfig, files: &Self::Files) -> Result<Self::Summary>;
}

/// A job whose rows run through the file runner of [`crate::pipeline::files`]: its
/// job type on a backend, how it is built and what a run returns.
pub trait FileJobKind: JobKind<Files = FileRun> {
    /// The job on a backend `B`: what [`Registered::load`] boxes and
    /// [`Registered::run_files`] runs over files.
    type Job<B: Backend + 'static>: FileJob + Send + 'static;
    /// Builds the job on `be` (weights and tokenizers load here).
    fn job<B: Backend + 'static>(self, be: B) -> Result<Self::Job<B>>;
    /// What a run over files returns, from the file runner's summary and the job
    /// after the run.
    fn summary<B: Backend + 'static>(job: &Self::Job<B>, run: RunSummary) -> Self::Summary;
    /// [`Registered::load`]: the job built on `be`.
    fn load<B: Backend + 'static>(self, be: B) -> Result<Box<dyn Job>> {
        Ok(Box::new(self.job(be)?))
    }
    /// [`Registered::run_files`]: [`run_on_device`].
    fn run_files(self, device: &DeviceConfig, run: &FileRun) -> Result<Self::Summary> {
        run_on_device(self, device, run)
    }
}

impl<C: FileJobKind> Registered for C {
    fn load<B: Backend + 'static>(self, be: B) -> Result<Box<dyn Job>> {
        FileJobKind::load(self, be)
    }
    fn run_files(self, device: &DeviceConfig, files: &FileRun) -> Result<Self::Summary> {
        FileJobKind::run_files(self, device, files)
    }
}

/// [`FileJobKind::run_files`] of a job that runs its model on `device`: the job built
/// on the device's backend, run over the files of `run`, then its summary.
pub fn run_on_device<C: FileJobKind>(
    config: C,
    device: &DeviceConfig,
    run: &FileRun,
) -> Result<C::Summary> {
    device::with_backend!(owned device, be => {
        let mut job = config.job(be)?;
        let summary = files::run(&mut job, run)?;
        Ok(C::summary(&job, summary))
    })
}

/// Runs a job over its files, the run path of every job's subcommand: its hub ids
/// resolved, its outputs checked against every input before anything loads, then the
/// job loaded and run. (The command line installs the Ctrl-C handler first.)
pub fn run<C: Registered>(
    mut config: C,
    mut files: C::Files,
    device: C::Device,
) -> Result<C::Summary> {
    options::resolve_models(config.model_paths())?;
    let device = device.into();
    files.prepare(config.inputs(), C::device_settings(&device)?)?;
    config.run_files(&device, &files)
}

/// `C` with `options` set by name ([`options::with_options`]), the required ones given.
pub fn config_from_options<C: JobKind>(options: &OptionMap) -> Result<C> {
    options::with_options(options, C::REQUIRED, &format!("`{}`", C::NAME))
}

/// The config of any registered job, to build it without naming its type.
pub struct JobConfig(Box<dyn AnyConfig>);

/// A registered job's config, its type erased.
trait AnyConfig: Send {
    fn name(&self) -> &'static str;
    fn debug(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result;
    fn clone_box(&self) -> Box<dyn AnyConfig>;
    fn options(&self) -> Result<serde_json::Value>;
    fn build(self: Box<Self>, device: &DeviceConfig) -> Result<Box<dyn Job>>;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<C: Registered> AnyConfig for C {
    fn name(&self) -> &'static str {
        C::NAME
    }
    fn debug(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
    fn clone_box(&self) -> Box<dyn AnyConfig> {
        Box::new(self.clone())
    }
    fn options(&self) -> Result<serde_json::Value> {
        Ok(serde_json::to_value(self)?)
    }
    fn build(self: Box<Self>, device: &DeviceConfig) -> Result<Box<dyn Job>> {
        build_kind(*self, device)
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl std::fmt::Debug for JobConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.debug(f)
    }
}

impl Clone for JobConfig {
    fn clone(&self) -> Self {
        Self(self.0.clone_box())
    }
}

impl JobConfig {
    /// The config `config` of its job.
    pub fn new<C: Registered>(config: C) -> Self {
        Self(Box::new(config))
    }

    /// The job's name.
    pub fn name(&self) -> &'static str {
        self.0.name()
    }

    /// The options by name (the config's serde form: what [`JobConfig::from_options`]
    /// reads, what the run metadata records).
    pub fn options(&self) -> Result<serde_json::Value> {
        self.0.options()
    }

    /// The config as the job's own type (`None` when it is another job's).
    pub fn downcast<C: Registered>(self) -> Option<C> {
        self.0.into_any().downcast().ok().map(|c| *c)
    }

    /// The options of the job `command` by name, each at its default (the command
    /// line's: [`Options::defaults`], required paths empty), the device's among them
    /// where the job runs a model, and the names of the options without a default:
    /// what Python's job classes must take.
    pub fn option_defaults(command: &str) -> Result<(OptionMap, &'static [&'static str])> {
        struct Defaults;
        impl KindFn for Defaults {
            type Out = Result<(OptionMap, &'static [&'static str])>;
            fn call<C: Registered>(self) -> Self::Out {
                let mut all = OptionMap::new();
                let device = serde_json::to_value(DeviceConfig::CPU)?;
                let config = serde_json::to_value(C::defaults())?;
                let device = device.as_object().filter(|_| C::RUNS_MODEL);
                for fields in [config.as_object(), device].into_iter().flatten() {
                    all.extend(fields.clone());
                }
                Ok((all, C::REQUIRED))
            }
        }
        with_kind(command, Defaults)?
    }

    /// The job `command` names with `options` set by name — its config's field names
    /// (the command line's flags with `_` for `-`) — and the device among them (the
    /// fields of [`DeviceConfig`]: `device`, `gpu`, `dtype`, `cpu_gemm`, …); every
    /// option not given keeps the default the command line has. What Python's keyword
    /// arguments build.
    pub fn from_options(command: &str, options: &OptionMap) -> Result<(JobConfig, DeviceConfig)> {
        let (device, job): (OptionMap, OptionMap) = options
            .clone()
            .into_iter()
            .partition(|(name, _)| super::is_device_option(name));
        struct FromOptions(OptionMap);
        impl KindFn for FromOptions {
            type Out = Result<JobConfig>;
            fn call<C: Registered>(self) -> Self::Out {
                Ok(JobConfig::new(config_from_options::<C>(&self.0)?))
            }
        }
        let config = with_kind(command, FromOptions(job))??;
        let device: DeviceConfig = options::with_options(&device, &[], "the device")?;
        options::none_or_at_least_one("threads", device.threads)?;
        Ok((config, device))
    }
}

/// Loads the job `config` describes on `device` (`review` runs no model: give it
/// [`DeviceConfig::CPU`]). With `device.threads`, the job loads and runs in a worker
/// pool of that many threads of its own; without, in the process's global pool.
/// Models named by a hub id are taken from the hub cache, or downloaded into it, first
/// ([`options::resolve_models`]).
pub fn build(config: JobConfig, device: &DeviceConfig) -> Result<Box<dyn Job>> {
    config.0.build(device)
}

/// [`build`] of a config of type `C`.
fn build_kind<C: Registered>(mut config: C, device: &DeviceConfig) -> Result<Box<dyn Job>> {
    options::resolve_models(config.model_paths())?;
    let (inputs, settings) = (config.inputs(), C::device_settings(device)?);
    let load = move || device::with_backend!(owned device, be => config.load(be));
    let job = match device.thread_pool()? {
        None => load()?,
        Some(pool) => {
            let job = pool.install(load)?;
            Box::new(Pooled { pool, job })
        }
    };
    Ok(Box::new(WithInputs::new(job, &inputs, &settings)?))
}
