//! The subcommands of the jobs, one per registered job ([`crate::jobs::registry`]):
//! each is its config's flags (the config type derives them), the flags of the files
//! it reads and writes (`JobKind::Files`) and those of the device, and every one runs
//! through [`crate::jobs::run`].

use std::any::Any;

use anyhow::Result;
use clap::{ArgMatches, Args, FromArgMatches};

use crate::jobs::registry::{self, Kinds, Registered};
use crate::jobs::report::Report;
use crate::jobs::{DeviceConfig, JobConfig, JobKind};
use crate::pipeline::control::install_interrupt_handler;

/// The flags of a job's subcommand: its config's, its files', its device's.
#[derive(Debug, Clone, Args)]
pub struct JobArgs<C: JobKind> {
    #[command(flatten)]
    pub config: C,
    #[command(flatten)]
    pub files: C::Files,
    #[command(flatten)]
    pub device: C::Device,
}

/// Runs a job over its files: the Ctrl-C handler first (so a Ctrl-C while the model
/// loads ends the run cleanly too), then [`crate::jobs::run`].
pub fn run<C: Registered>(args: JobArgs<C>) -> Result<C::Summary> {
    install_interrupt_handler();
    crate::jobs::run(args.config, args.files, args.device)
}

/// The subcommand of one job, parsed: [`JobCommand::run`] runs it, [`JobCommand::args`]
/// gives its flags back as the job's own [`JobArgs`].
#[derive(Debug)]
pub struct JobCommand(Box<dyn Parsed>);

/// A job's parsed flags, their config type erased.
trait Parsed: std::fmt::Debug {
    fn run(self: Box<Self>) -> Result<i32>;
    fn into_config(self: Box<Self>) -> (JobConfig, DeviceConfig);
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<C: Registered> Parsed for JobArgs<C> {
    fn run(self: Box<Self>) -> Result<i32> {
        let ending = run(*self)?.report(C::ROW);
        print!("{}", ending.stdout);
        for line in &ending.stderr {
            eprintln!("{line}");
        }
        Ok(ending.code)
    }
    fn into_config(self: Box<Self>) -> (JobConfig, DeviceConfig) {
        (JobConfig::new(self.config), self.device.into())
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl JobCommand {
    /// Runs the job, prints its summary and returns the exit code.
    pub fn run(self) -> Result<i32> {
        self.0.run()
    }

    /// The job's config and device, as [`crate::jobs::build`] takes them (what the
    /// command would run, for batches).
    pub fn into_config(self) -> (JobConfig, DeviceConfig) {
        self.0.into_config()
    }

    /// The flags as `JobArgs<C>` (`None` when they are another job's).
    pub fn args<C: Registered>(self) -> Option<JobArgs<C>> {
        self.0.into_any().downcast().ok().map(|a| *a)
    }
}

impl FromArgMatches for JobCommand {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let Some((name, sub)) = matches.subcommand() else {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::MissingSubcommand,
                "a job's subcommand is needed",
            ));
        };
        struct Parse<'a> {
            name: &'a str,
            sub: &'a ArgMatches,
            out: Option<Result<JobCommand, clap::Error>>,
        }
        impl Kinds for Parse<'_> {
            fn kind<C: Registered>(&mut self) {
                if C::NAME == self.name {
                    let args = JobArgs::<C>::from_arg_matches(self.sub);
                    self.out = Some(args.map(|a| JobCommand(Box::new(a))));
                }
            }
        }
        let mut parse = Parse {
            name,
            sub,
            out: None,
        };
        registry::each_kind(&mut parse);
        parse.out.unwrap_or_else(|| {
            Err(clap::Error::raw(
                clap::error::ErrorKind::InvalidSubcommand,
                format!("`{name}` is not a job"),
            ))
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Subcommand for JobCommand {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        struct Add(clap::Command);
        impl Kinds for Add {
            fn kind<C: Registered>(&mut self) {
                // The help line after the flags: `augment_args` sets JobArgs' own doc.
                let sub = JobArgs::<C>::augment_args(clap::Command::new(C::NAME))
                    .about(C::ABOUT)
                    .long_about(None);
                let cmd = std::mem::replace(&mut self.0, clap::Command::new(""));
                self.0 = cmd.subcommand(sub);
            }
        }
        let mut add = Add(cmd);
        registry::each_kind(&mut add);
        add.0
    }

    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_subcommands(cmd)
    }

    fn has_subcommand(name: &str) -> bool {
        registry::names().contains(&name)
    }
}
