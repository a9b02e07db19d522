//! Compiles every `kernels/*.cu` with nvcc to its own fatbin (SASS for each of
//! [`SASS_ARCHS`] and [`PTX_ARCH`] PTX, uncompressed: the driver loads the SASS without
//! JIT, the PTX serves newer GPUs and the CPU emulator) and generates
//! `$OUT_DIR/kernels.rs`: the nvcc release, a table of `(op name, fatbin bytes)`
//! embedded in the binary, the list of kernel entry points (`(entry, op name)`, read
//! from each fatbin's PTX `.entry` directives, which `HOPSCORE_ENTRY` names after macro
//! expansion), the SHA-256 of each entry's machine code per SASS image (`KERNEL_SASS`,
//! what kernels/proven.tsv's hardware records are matched against), and module `geometry`: the constants and shared-memory formulas of
//! `kernels/geometry.cuh` as Rust `const` items and `const fn`s (with or without nvcc).
//!
//! nvcc is looked up as `$NVCC`, `$CUDA_HOME/bin/nvcc`, then on `PATH`. Without
//! nvcc the crate builds CPU-only with a warning; `HOPSCORE_REQUIRE_NVCC=1` turns
//! that into an error (CI sets it so that every kernel always compiles).
//!
//! `kernels/cutlass/` holds the GEMMs built on CUTLASS (headers from `$HOPSCORE_CUTLASS`,
//! a `cutlass_library/source` folder, else the `nvidia-cutlass` wheel next to nvcc's,
//! which tools/nvcc.sh installs): each `<op>.cu` is a module like the others, each
//! `<op>_host.cu` host code (CUTLASS's Params builders) archived into
//! `libhopscore_cutlass.a` and linked, and the crate is built with `cfg(hopscore_cutlass)`.
//! Without the headers those GEMMs are left out with a warning (an error under
//! `HOPSCORE_REQUIRE_NVCC=1`) and the backend runs cuBLASLt and a separate pass instead.
//!
//! Beside each output nvcc's stderr (`<output>.log`); for a kernel file, with `-Xptxas -v`,
//! ptxas's report of every entry (registers, spills, serialised wgmma), which
//! tools/sass_report.py reads with the fatbin's SASS. nvcc's outputs and their logs are
//! kept in a cache ([`KernelCache`]) keyed by nvcc, its arguments, the
//! file compiled and every header: `cargo build`, `cargo clippy`, builds with other
//! features and maturin each run this script in an `OUT_DIR` of their own and would
//! otherwise compile every kernel again, and an edit of one kernel file recompiles that
//! file only.

use std::env;
use std::fmt::Write as _;
use std::fs::File;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::SystemTime;

// Shared with the CUDA backend, which uses all of it; here only the parsing is needed.
#[path = "src/backend/cubin.rs"]
mod cubin;
#[allow(dead_code)]
#[path = "src/backend/fatbin.rs"]
mod fatbin;

/// SASS built into every fatbin: Ampere (also runs on sm_86/sm_89) and Hopper.
const SASS_ARCHS: [&str; 2] = ["80", "90"];
/// A kernel file's own SASS list instead: a line `// hopscore-sass: sm_90a` (for
/// arch-specific instructions such as wgmma; its other images trap, see the file).
const SASS_LINE: &str = "// hopscore-sass:";
/// PTX baseline, JIT-compiled by the driver only on GPUs without matching SASS.
const PTX_ARCH: u32 = 80;

fn main() {
    println!("cargo:rerun-if-env-changed=NVCC");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    println!("cargo:rerun-if-env-changed=HOPSCORE_REQUIRE_NVCC");
    println!("cargo:rerun-if-env-changed={CUTLASS_ENV}");
    println!("cargo:rerun-if-env-changed={CACHE_ENV}");
    println!("cargo:rustc-check-cfg=cfg(hopscore_cutlass)");
    // A folder: cargo checks every file under it, kernels/cutlass/ included.
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=src/backend/fatbin.rs");
    println!("cargo:rerun-if-changed=src/backend/cubin.rs");

    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut sources = kernel_sources(Path::new("kernels"));

    let require = env::var("HOPSCORE_REQUIRE_NVCC").is_ok_and(|v| v == "1");
    let nvcc = find_nvcc().map(|path| Nvcc::new(path, &out_dir));
    match &nvcc {
        Some(
            nvcc @ Nvcc {
                cutlass: Some(_), ..
            },
        ) => {
            let (device, host) = cutlass_sources();
            sources.extend(device);
            link_cutlass_host(nvcc, &host, &out_dir);
            println!("cargo:rustc-cfg=hopscore_cutlass");
        }
        Some(_) if require => panic!(
            "HOPSCORE_REQUIRE_NVCC=1 but CUTLASS's headers were not found: set ${CUTLASS_ENV} to \
             a cutlass_library/source folder, or install nvidia-cutlass==4.2.0.0 next to nvcc \
             (tools/nvcc.sh does)"
        ),
        Some(_) => println!(
            "cargo:warning=CUTLASS headers not found (${CUTLASS_ENV}, or the nvidia-cutlass \
             wheel next to nvcc): building without the CUTLASS GEMMs (cuBLASLt and separate \
             passes run instead; tools/nvcc.sh installs them)"
        ),
        None if require => panic!(
            "HOPSCORE_REQUIRE_NVCC=1 but nvcc was not found: set $NVCC or $CUDA_HOME, \
             or install the CUDA 13.0 nvcc wheels (see .ci/run)"
        ),
        None => println!(
            "cargo:warning=nvcc not found ($NVCC, $CUDA_HOME/bin, PATH): building without \
             CUDA kernels (the CPU backend is complete; set NVCC to compile them)"
        ),
    }
    let (release, modules) = match &nvcc {
        Some(nvcc) => {
            let modules = compile_all(nvcc, &sources, &out_dir);
            nvcc.cache.prune();
            (release(&nvcc.version), modules)
        }
        None => (String::new(), Vec::new()),
    };
    let mut table = table(&release, &modules);
    table.push_str(&geometry(GEOMETRY));
    std::fs::write(out_dir.join("kernels.rs"), table).expect("write kernels.rs");
}

/// The folder of the GEMMs built on CUTLASS.
const CUTLASS_DIR: &str = "kernels/cutlass";
/// Where CUTLASS's `include/` and `tools/util/include/` are (a `cutlass_library/source`).
const CUTLASS_ENV: &str = "HOPSCORE_CUTLASS";

/// CUTLASS's source folder: `$HOPSCORE_CUTLASS`, else the `nvidia-cutlass` wheel in the
/// site-packages of the nvcc wheel (`site-packages/nvidia/cu13/bin/nvcc`).
fn find_cutlass(nvcc: &Path) -> Option<PathBuf> {
    let dir = match env::var(CUTLASS_ENV) {
        Ok(d) => PathBuf::from(d),
        Err(_) => nvcc.ancestors().nth(4)?.join("cutlass_library/source"),
    };
    dir.join("include/cutlass/cutlass.h")
        .exists()
        .then_some(dir)
}

/// The CUTLASS folder's device modules and host files (`*_host.cu`).
fn cutlass_sources() -> (Vec<PathBuf>, Vec<PathBuf>) {
    kernel_sources(Path::new(CUTLASS_DIR))
        .into_iter()
        .partition(|p| !p.to_string_lossy().ends_with("_host.cu"))
}

/// nvcc's flags for a file that includes CUTLASS (`cutlass`: its source folder).
fn cutlass_flags(cmd: &mut Command, cutlass: &Path) {
    cmd.arg("--expt-relaxed-constexpr")
        .arg("-DNDEBUG")
        .arg(format!("-I{CUTLASS_DIR}"))
        .arg(format!("-I{}", cutlass.join("include").display()))
        .arg(format!(
            "-I{}",
            cutlass.join("tools/util/include").display()
        ));
}

/// Compiles the host files into `$OUT_DIR/libhopscore_cutlass.a` and links it (with the
/// C++ runtime its CUTLASS code uses).
fn link_cutlass_host(nvcc: &Nvcc, host: &[PathBuf], out_dir: &Path) {
    let lib = out_dir.join("libhopscore_cutlass.a");
    let mut cmd = Command::new(&nvcc.path);
    cmd.args(["-lib", "-O2", "-std=c++17", "-Xcompiler", "-fPIC"])
        .arg("-gencode=arch=compute_90a,code=sm_90a");
    if let Some(cutlass) = &nvcc.cutlass {
        cutlass_flags(&mut cmd, cutlass);
    }
    nvcc.run(cmd.args(host), &lib, &format!("{host:?}"));
    println!("cargo:rustc-link-search=native={}", out_dir.display());
    println!("cargo:rustc-link-lib=static=hopscore_cutlass");
    println!("cargo:rustc-link-lib=dylib=stdc++");
}

/// The header of launch-geometry constants shared by kernels, launchers and sass_report.
const GEOMETRY: &str = "kernels/geometry.cuh";

/// `kernels/geometry.cuh` as Rust: `constexpr unsigned NAME = EXPR;` becomes a `pub
/// const NAME: u32`, `constexpr unsigned f(unsigned a) { return EXPR; }` a `pub const
/// fn f(a: u32) -> u32` (the expressions are C++ and Rust alike).
fn geometry(path: &str) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut s = String::from(
        "\n/// Launch geometry from kernels/geometry.cuh (see there).\npub mod geometry {\n",
    );
    for line in text.lines().map(str::trim) {
        let Some(def) = line.strip_prefix("constexpr unsigned ") else {
            continue;
        };
        let def = def.split("//").next().unwrap().trim();
        if let Some((name, expr)) = def.split_once(" = ") {
            let expr = expr
                .strip_suffix(';')
                .unwrap_or_else(|| panic!("{path}: {line}"));
            writeln!(s, "    pub const {name}: u32 = {expr};").unwrap();
        } else if let Some((head, body)) = def.split_once(") { return ") {
            let (name, params) = head
                .split_once('(')
                .unwrap_or_else(|| panic!("{path}: {line}"));
            let expr = body
                .strip_suffix("; }")
                .unwrap_or_else(|| panic!("{path}: {line}"));
            let params: Vec<String> = params
                .split(',')
                .map(|p| format!("{}: u32", p.trim().trim_start_matches("unsigned ")))
                .collect();
            writeln!(
                s,
                "    pub const fn {name}({}) -> u32 {{ {expr} }}",
                params.join(", ")
            )
            .unwrap();
        } else {
            panic!("{path}: not of a form build.rs reads: {line}");
        }
    }
    s.push_str("}\n");
    s
}

fn kernel_sources(dir: &Path) -> Vec<PathBuf> {
    files_in(dir)
        .into_iter()
        .filter(|p| is_kernel_file(p))
        .collect()
}

/// Whether `path` is a header a kernel file can include (`.cuh`, `.h`): what the
/// kernel cache's key hashes besides the file compiled (not the notes, not
/// kernels/proven.tsv).
fn is_header(path: &Path) -> bool {
    path.extension()
        .is_some_and(|x| x == "cuh" || x == "h" || x == "hpp")
}

/// Whether `path` is a `.cu` file.
fn is_kernel_file(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "cu")
}

/// The files in `dir` (not in its subfolders), sorted; none if it cannot be read.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// The nvcc this build uses, with what is found next to it.
struct Nvcc {
    path: PathBuf,
    /// `nvcc --version`'s text.
    version: String,
    /// CUTLASS's source folder ([`find_cutlass`]).
    cutlass: Option<PathBuf>,
    cache: KernelCache,
}

impl Nvcc {
    fn new(path: PathBuf, out_dir: &Path) -> Self {
        let out = Command::new(&path)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("could not run nvcc at {}: {e}", path.display()));
        let version = String::from_utf8_lossy(&out.stdout).into_owned();
        let cutlass = find_cutlass(&path);
        let cache = KernelCache::new(&path, &version, cutlass.as_deref(), out_dir);
        Self {
            path,
            version,
            cutlass,
            cache,
        }
    }

    /// Runs `cmd` (an nvcc command, all but its `-o`) writing `out` and its stderr to
    /// [`log_of`]`(out)`, unless the cache has what the same inputs made; panics naming
    /// `what` if nvcc fails.
    fn run(&self, cmd: &mut Command, out: &Path, what: &str) {
        let log = log_of(out);
        let entry = self.cache.entry(cmd, out);
        if entry
            .as_deref()
            .is_some_and(|e| KernelCache::fetch(e, out) && KernelCache::fetch(&log_of(e), &log))
        {
            return;
        }
        run_nvcc(cmd.arg("-o").arg(out), &self.path, what, &log);
        if let Some(entry) = entry {
            KernelCache::store(&entry, out);
            KernelCache::store(&log_of(&entry), &log);
        }
    }
}

fn find_nvcc() -> Option<PathBuf> {
    if let Ok(p) = env::var("NVCC") {
        return Some(PathBuf::from(p));
    }
    if let Ok(home) = env::var("CUDA_HOME") {
        let p = Path::new(&home).join("bin/nvcc");
        if p.exists() {
            return Some(p);
        }
    }
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|d| d.join("nvcc"))
        .find(|p| p.exists())
}

/// nvcc's CUDA release ("13.0") from its `--version` text ("Cuda compilation tools,
/// release 13.0, V13.0.88").
fn release(version: &str) -> String {
    version
        .split("release ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("no `release X.Y` in `nvcc --version`: {version}"))
        .to_string()
}

/// Compiles every source on `$NUM_JOBS` threads; returns its module in source order.
fn compile_all(nvcc: &Nvcc, sources: &[PathBuf], out_dir: &Path) -> Vec<Module> {
    let jobs = env::var("NUM_JOBS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, sources.len().max(1));
    let next = Mutex::new(0usize);
    let done = Mutex::new(vec![None; sources.len()]);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    *n += 1;
                    *n - 1
                };
                let Some(src) = sources.get(i) else { break };
                let module = compile(nvcc, src, out_dir);
                done.lock().unwrap()[i] = Some(module);
            });
        }
    });
    done.into_inner()
        .unwrap()
        .into_iter()
        .map(|m| m.expect("every source compiled"))
        .collect()
}

/// One compiled kernel file: its op name (the file stem), source and fatbin.
#[derive(Clone)]
struct Module {
    name: String,
    src: PathBuf,
    fatbin: PathBuf,
}

/// Compiles one `.cu` file to `$OUT_DIR/<stem>.fatbin` (with CUTLASS's flags for the
/// files under [`CUTLASS_DIR`]).
fn compile(nvcc: &Nvcc, src: &Path, out_dir: &Path) -> Module {
    let stem = src.file_stem().unwrap().to_string_lossy().into_owned();
    let out = out_dir.join(format!("{stem}.fatbin"));
    let mut cmd = Command::new(&nvcc.path);
    cmd.args(["-fatbin", "--no-compress", "-O3", "-std=c++17", "-Ikernels"])
        .args(["-Xptxas", "-v"]);
    if let Some(cutlass) = nvcc
        .cutlass
        .as_ref()
        .filter(|_| src.starts_with(CUTLASS_DIR))
    {
        cutlass_flags(&mut cmd, cutlass);
    }
    for sm in sass_archs(src) {
        cmd.arg(format!("-gencode=arch=compute_{sm},code=sm_{sm}"));
    }
    cmd.arg(format!(
        "-gencode=arch=compute_{PTX_ARCH},code=compute_{PTX_ARCH}"
    ));
    nvcc.run(cmd.arg(src), &out, &src.display().to_string());
    Module {
        name: stem,
        src: src.to_path_buf(),
        fatbin: out,
    }
}

/// nvcc's stderr beside its output `out` (`<out>.log`): for a kernel file, ptxas's
/// `-v` report per entry and arch (registers, spills, shared memory, serialised wgmma),
/// which tools/sass_report.py reads.
fn log_of(out: &Path) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(".log");
    PathBuf::from(name)
}

/// Runs nvcc command `cmd` (at `nvcc`), which compiles `what`, its stderr to `log`;
/// panics with that text if it fails.
fn run_nvcc(cmd: &mut Command, nvcc: &Path, what: &str, log: &Path) {
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("could not run nvcc at {}: {e}", nvcc.display()));
    std::fs::write(log, &output.stderr).unwrap_or_else(|e| panic!("write {}: {e}", log.display()));
    assert!(
        output.status.success(),
        "nvcc failed on {what}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Where this script keeps nvcc's outputs between runs: `$HOPSCORE_KERNEL_CACHE`, else
/// `<target>/kernel-cache` (cargo's `OUT_DIR` is `<target>/<profile>/build/<pkg>/out`);
/// `HOPSCORE_KERNEL_CACHE=off` compiles every time. `cargo clean` empties it.
const CACHE_ENV: &str = "HOPSCORE_KERNEL_CACHE";

/// How many files the cache keeps: about twelve whole versions of `kernels/` (22 outputs
/// and their logs, ≈ 6 MB, each).
const CACHE_ENTRIES: usize = 528;

/// nvcc's outputs by a key of everything they are made from: nvcc's path and `--version`,
/// CUTLASS's version header, the contents of every header in `kernels/` and
/// [`CUTLASS_DIR`] ([`is_header`]: a header change recompiles every kernel), the
/// command's arguments and the contents of the `.cu` files among them (kernel files
/// include headers only). An entry is written to a temporary name and renamed, so a build
/// that stops halfway leaves no half-written entry.
struct KernelCache {
    dir: Option<PathBuf>,
    inputs: DefaultHasher,
}

impl KernelCache {
    /// `version`: nvcc's `--version` text.
    fn new(nvcc: &Path, version: &str, cutlass: Option<&Path>, out_dir: &Path) -> Self {
        let dir = match env::var(CACHE_ENV) {
            Ok(v) if v == "off" => None,
            Ok(v) => Some(PathBuf::from(v)),
            Err(_) => out_dir
                .ancestors()
                .nth(4)
                .map(|target| target.join("kernel-cache")),
        };
        let mut inputs = DefaultHasher::new();
        nvcc.hash(&mut inputs);
        version.hash(&mut inputs);
        if let Some(cutlass) = cutlass {
            read(&cutlass.join("include/cutlass/version.h")).hash(&mut inputs);
        }
        let folders = [Path::new("kernels"), Path::new(CUTLASS_DIR)];
        for file in folders.into_iter().flat_map(files_in) {
            if is_header(&file) {
                file.hash(&mut inputs);
                read(&file).hash(&mut inputs);
            }
        }
        Self { dir, inputs }
    }

    /// The entry of nvcc command `cmd` (all but its `-o`) writing `out`; `None` when the
    /// cache is off.
    fn entry(&self, cmd: &Command, out: &Path) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let mut key = self.inputs.clone();
        for arg in cmd.get_args() {
            arg.hash(&mut key);
            if is_kernel_file(Path::new(arg)) {
                read(Path::new(arg)).hash(&mut key);
            }
        }
        let name = out.file_name().unwrap().to_string_lossy();
        Some(dir.join(format!("{:016x}-{name}", key.finish())))
    }

    /// Copies `entry` to `out` if it is there, marking it used (for [`KernelCache::prune`]).
    fn fetch(entry: &Path, out: &Path) -> bool {
        if std::fs::copy(entry, out).is_err() {
            return false;
        }
        let _ = File::options()
            .write(true)
            .open(entry)
            .and_then(|f| f.set_modified(SystemTime::now()));
        true
    }

    /// Keeps `out` as `entry`. A cache that cannot be written only costs the next build
    /// its time.
    fn store(entry: &Path, out: &Path) {
        let partial = entry.with_extension(format!("partial-{}", std::process::id()));
        let _ = std::fs::create_dir_all(entry.parent().unwrap())
            .and_then(|()| std::fs::copy(out, &partial))
            .and_then(|_| std::fs::rename(&partial, entry));
    }

    /// Removes all but the [`CACHE_ENTRIES`] most recently used entries.
    fn prune(&self) {
        let Some(dir) = &self.dir else { return };
        let mut entries: Vec<(SystemTime, PathBuf)> = files_in(dir)
            .into_iter()
            .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
            .collect();
        entries.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
        for (_, stale) in entries.iter().skip(CACHE_ENTRIES) {
            let _ = std::fs::remove_file(stale);
        }
    }
}

/// The bytes of `path`; panics naming it.
fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The SASS architectures of kernel file `src` ("80", "90a"): [`SASS_ARCHS`] unless a
/// [`SASS_LINE`] names others.
fn sass_archs(src: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    match text.lines().find_map(|l| l.trim().strip_prefix(SASS_LINE)) {
        Some(list) => list
            .split(',')
            .map(|a| {
                a.trim()
                    .strip_prefix("sm_")
                    .unwrap_or_else(|| {
                        panic!("{}: `{SASS_LINE}{list}`: sm_XY names", src.display())
                    })
                    .to_string()
            })
            .collect(),
        None => SASS_ARCHS.map(String::from).to_vec(),
    }
}

/// The entry points of one fatbin, checked to hold each SASS of `src` and the
/// uncompressed PTX.
fn entries(src: &Path, path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).expect("read fatbin");
    let images = fatbin::images(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for sm in sass_archs(src) {
        let name = format!("sm_{sm} SASS");
        assert!(
            images.iter().any(|i| i.to_string() == name),
            "{}: no {name}",
            path.display()
        );
    }
    let ptx = images
        .iter()
        .find(|i| i.kind == fatbin::Kind::Ptx && i.arch == PTX_ARCH)
        .and_then(|i| i.ptx_text())
        .unwrap_or_else(|| panic!("{}: no uncompressed compute_{PTX_ARCH} PTX", path.display()));
    let entries: Vec<String> = fatbin::ptx_entries(ptx)
        .into_iter()
        .map(String::from)
        .collect();
    assert!(
        !entries.is_empty(),
        "no .entry in the PTX of {}",
        path.display()
    );
    entries
}

/// The nvcc release, the fatbin table and the entry list.
fn table(release: &str, modules: &[Module]) -> String {
    let mut s = format!(
        "// Generated by build.rs.\n\
         /// CUDA release of the nvcc that built the kernels (\"\" without kernels).\n\
         pub const NVCC_RELEASE: &str = {release:?};\n\n\
         /// One (op name, fatbin) entry per kernels/*.cu.\n\
         pub const MODULES: &[(&str, &[u8])] = &[\n"
    );
    for m in modules {
        writeln!(
            s,
            "    ({:?}, include_bytes!({:?})),",
            m.name,
            m.fatbin.display().to_string()
        )
        .unwrap();
    }
    s.push_str(
        "];\n\n/// (kernel entry, op name) of every `.entry` in the fatbins' PTX.\n\
         pub const KERNEL_ENTRIES: &[(&str, &str)] = &[\n",
    );
    let mut sass = String::new();
    for m in modules {
        let entries = entries(&m.src, &m.fatbin);
        for entry in &entries {
            writeln!(s, "    ({entry:?}, {:?}),", m.name).unwrap();
        }
        for (entry, arch, hash) in sass_hashes(&m.fatbin, &entries) {
            writeln!(sass, "    ({entry:?}, {arch:?}, {hash:?}),").unwrap();
        }
    }
    s.push_str(
        "];\n\n/// (kernel entry, SASS architecture such as \"sm_90a\", SHA-256 of the entry's \
         machine code) of every entry in every SASS image.\n\
         pub const KERNEL_SASS: &[(&str, &str, &str)] = &[\n",
    );
    s.push_str(&sass);
    s.push_str("];\n");
    s
}

/// `(entry, "sm_XY[a]", hex SHA-256 of its `.text` section)` for each of `entries` in
/// each SASS image of fatbin `path` ([`cubin::entry_texts`]); every entry must be in every
/// image.
fn sass_hashes(path: &Path, entries: &[String]) -> Vec<(String, String, String)> {
    use sha2::Digest as _;
    let bytes = read(path);
    let images = fatbin::images(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    for image in images.iter().filter(|i| i.kind == fatbin::Kind::Sass) {
        let arch = image.to_string().replace(" SASS", "");
        let texts = cubin::entry_texts(image.payload)
            .unwrap_or_else(|e| panic!("{} ({arch}): {e}", path.display()));
        for entry in entries {
            let (_, text) = texts
                .iter()
                .find(|(name, _)| name == entry)
                .unwrap_or_else(|| panic!("{} ({arch}): no .text.{entry}", path.display()));
            let hash: String = sha2::Sha256::digest(text)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            out.push((entry.clone(), arch.clone(), hash));
        }
    }
    out
}
