// hopscore CUDA CPU emulator: the module images cuModuleLoadData accepts (see
// README.md). A fatbin (`nvcc -fatbin`, build.rs) is read as a driver reads it: the
// SASS for the emulated device's compute capability if there is one (entries from the
// cubin's ELF symbol table), else PTX the device and driver can JIT (entries from its
// `.entry` directives); PTX text is read directly. The layout parsed here is the one
// src/backend/fatbin.rs documents.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

namespace fatbin {

constexpr uint32_t kMagic = 0xBA55ED50u;
constexpr uint64_t kCompressed = 0x2000 | 0x8000;  // LZ4, zstd payloads
constexpr uint64_t kArchSpecific = 0x100000;          // an sm_XYa image (nvcc 13.0)

// The device and driver the emulator poses as: HOPSCORE_CUDA_EMU_CC ("major.minor",
// default 9.0) as 10·major + minor, and HOPSCORE_CUDA_EMU_DRIVER (cuDriverGetVersion's
// number, default 13000). Read once.
inline int device_cc() {
  static const int cc = [] {
    const char* s = getenv("HOPSCORE_CUDA_EMU_CC");
    int major = 9, minor = 0;
    if (s && sscanf(s, "%d.%d", &major, &minor) != 2) {
      fprintf(stderr, "cuda_emu: HOPSCORE_CUDA_EMU_CC=%s is not major.minor; using 9.0\n", s);
      major = 9, minor = 0;
    }
    return major * 10 + minor;
  }();
  return cc;
}
inline int driver_version() {
  static const int v = [] {
    const char* s = getenv("HOPSCORE_CUDA_EMU_DRIVER");
    return s ? atoi(s) : 13000;
  }();
  return v;
}

template <typename T> T at(const unsigned char* p, size_t off) {
  T v;
  memcpy(&v, p + off, sizeof v);
  return v;
}

// The `.entry` names of PTX text.
inline std::set<std::string> ptx_entries(const char* text) {
  std::set<std::string> out;
  const char* p = text;
  while ((p = strstr(p, ".entry")) != nullptr) {
    p += 6;
    if (*p != ' ' && *p != '\t') continue;
    while (*p == ' ' || *p == '\t') ++p;
    const char* b = p;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '$' || *p == '.') ++p;
    if (p > b) out.insert(std::string(b, p));
  }
  return out;
}

// The global functions of a cubin (ELF64 .symtab, STT_FUNC with STB_GLOBAL): its kernels.
inline std::set<std::string> cubin_entries(const unsigned char* elf, size_t size) {
  std::set<std::string> out;
  if (size < 64) return out;
  const uint64_t shoff = at<uint64_t>(elf, 0x28);
  const uint16_t shentsize = at<uint16_t>(elf, 0x3A), shnum = at<uint16_t>(elf, 0x3C);
  if (shoff + uint64_t(shnum) * shentsize > size) return out;
  for (unsigned i = 0; i < shnum; ++i) {
    const unsigned char* sh = elf + shoff + uint64_t(i) * shentsize;
    if (at<uint32_t>(sh, 4) != 2) continue;  // SHT_SYMTAB
    const uint64_t off = at<uint64_t>(sh, 0x18), bytes = at<uint64_t>(sh, 0x20);
    const uint32_t link = at<uint32_t>(sh, 0x28);
    if (link >= shnum || off + bytes > size) return out;
    const unsigned char* strtab_sh = elf + shoff + uint64_t(link) * shentsize;
    const uint64_t str_off = at<uint64_t>(strtab_sh, 0x18), str_size = at<uint64_t>(strtab_sh, 0x20);
    if (str_off + str_size > size) return out;
    for (uint64_t s = off; s + 24 <= off + bytes; s += 24) {
      const uint32_t name = at<uint32_t>(elf, s);
      const unsigned char info = elf[s + 4];
      if ((info & 0xf) == 2 && (info >> 4) == 1 && name < str_size)  // STT_FUNC, STB_GLOBAL
        out.insert(reinterpret_cast<const char*>(elf + str_off + name));
    }
  }
  return out;
}

// The driver that first reads PTX ISA `major.minor` (as cuDriverGetVersion counts):
// ISA 9.x is CUDA 13.x; older ISAs are approximated as CUDA (major + 4).minor.
inline int driver_for_isa(int major, int minor) { return (major + 4) * 1000 + minor * 10; }

enum class Load { Ok, NotFatbin, Invalid, NoBinaryForGpu, UnsupportedPtx };

struct Chosen {
  Load result = Load::NotFatbin;
  std::string what;  // the image chosen, or why none was
  std::set<std::string> entries;
};

// Chooses the image of fatbin `image` a driver would load on the emulated device.
inline Chosen choose(const unsigned char* image) {
  Chosen c;
  if (at<uint32_t>(image, 0) != kMagic) return c;
  c.result = Load::Invalid;
  const size_t header = at<uint16_t>(image, 6);
  const size_t end = header + at<uint64_t>(image, 8);
  const int cc = device_cc();
  const unsigned char* ptx = nullptr;
  size_t ptx_size = 0;
  int ptx_arch = 0, isa_major = 0, isa_minor = 0;
  bool ptx_compressed = false;
  for (size_t off = header; off + 64 <= end;) {
    const unsigned char* e = image + off;
    const uint16_t kind = at<uint16_t>(e, 0);
    const size_t start = off + at<uint32_t>(e, 4), size = at<uint64_t>(e, 8);
    const int arch = int(at<uint32_t>(e, 28));
    const bool compressed = at<uint64_t>(e, 40) & kCompressed;
    // An arch-specific image (sm_90a) runs on that exact compute capability only.
    const bool specific = at<uint64_t>(e, 40) & kArchSpecific;
    const bool runs = specific ? arch == cc : arch / 10 == cc / 10 && arch % 10 <= cc % 10;
    if (kind == 2 && runs && !compressed) {
      c.result = Load::Ok;
      c.what = "sm_" + std::to_string(arch) + (specific ? "a" : "") + " SASS";
      c.entries = cubin_entries(image + start, size);
      return c;
    }
    if (kind == 1 && arch <= cc && arch > ptx_arch) {
      ptx = image + start, ptx_size = size, ptx_arch = arch, ptx_compressed = compressed;
      isa_minor = at<uint16_t>(e, 24), isa_major = at<uint16_t>(e, 26);
    }
    off = start + size;
  }
  if (!ptx) {
    c.result = Load::NoBinaryForGpu;
    c.what = "no SASS for compute capability " + std::to_string(cc / 10) + "." + std::to_string(cc % 10) +
             " and no PTX at or below it";
  } else if (driver_version() < driver_for_isa(isa_major, isa_minor)) {
    c.result = Load::UnsupportedPtx;
    c.what = "compute_" + std::to_string(ptx_arch) + " PTX of ISA " + std::to_string(isa_major) + "." +
             std::to_string(isa_minor) + " needs a newer driver than " + std::to_string(driver_version());
  } else if (ptx_compressed) {
    c.what = "compute_" + std::to_string(ptx_arch) + " PTX is compressed (build with nvcc --no-compress)";
  } else {
    c.result = Load::Ok;
    c.what = "compute_" + std::to_string(ptx_arch) + " PTX (JIT)";
    c.entries = ptx_entries(std::string(reinterpret_cast<const char*>(ptx), ptx_size).c_str());
  }
  return c;
}

}  // namespace fatbin
