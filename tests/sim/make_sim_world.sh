#!/usr/bin/env bash
# make_sim_world.sh: creates a simulated container world, the tree that the simulated SGLang and
# vLLM servers (sglang-server-sim, run as python or as vllm) inspect to decide how a start goes
# (tests/sim/README.md).
#
#   make_sim_world.sh DIR [--state seed|fixed] [--break PROBLEM]... [--server PATH] [--gpus N]
#
#   --state seed    every problem of the seed cascade (docs/design.md) present (the default)
#   --state fixed   the state after the fixes: CUDA 13.2 throughout, ninja, lib64 and the libcuda
#                   stub, and a server environment (server.env) that uses them
#   --break P       with --state fixed: put one seed problem back, P one of
#                   loader_path nvcc ninja headers ptxas link_stub
#   --server PATH   the sglang-server-sim binary (default: the build next to this source tree)
#   --gpus N        GPUs the fake nvidia-smi reports (default 8)
#
# What it writes (DIR must be absent or empty):
#   sim-world.conf   key=value facts a supervisor's config needs: where the shims are
#                    (python, pip, apt_get, nvidia_smi), the model, the CUDA dir, the driver's
#                    libcuda, the device dir (dev_root)
#   server.env       key=value environment for a server of this world (PATH, HOME, and in the
#                    fixed state CUDA_HOME and LD_LIBRARY_PATH)
#   bin/             the container's /usr/bin: nvidia-smi, apt-get (apt-get-sim), c++ (links
#                    only: fake-cuda-tool), later ninja
#   venv/            bin/python (the simulated server, run as `python -m sglang.launch_server`),
#                    bin/vllm (the same binary, run as `vllm serve MODEL ...`), bin/pip (pip-sim), lib/python3.12/site-packages with pip-style dist-info and
#                    nvidia/cu13/{bin,include,lib,nvvm}
#   models/tiny/     a model directory with config.json
#   etc/             the fake nvidia-smi's data; usr/lib/...: the driver's libcuda.so.1
#   root/            HOME of the servers (flashinfer's JIT cache lands in root/.cache)
#   dev/             the GPU device nodes (nvidiaN, nvidiactl, nvidia-uvm, nvidia-uvm-tools),
#                    real character devices made with mknod; only when run as root (dev_root in
#                    sim-world.conf names it, else is empty)
#   sim/             the shims' data: the package index and templates
# Everything is data: no file written here is a shell string built from the arguments.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=deploy/lib/fleet.sh  # (shellcheck run from the repository root)
source "$src/../../deploy/lib/fleet.sh"
fleet_me=make_sim_world
dir=
state=seed
breaks=()
server=
gpus=8
while [[ $# -gt 0 ]]; do
  case $1 in
    --state) [[ $# -ge 2 ]] || usage; state=$2; shift ;;
    --state=*) state=${1#--state=} ;;
    --break) [[ $# -ge 2 ]] || usage; breaks+=("$2"); shift ;;
    --break=*) breaks+=("${1#--break=}") ;;
    --server) [[ $# -ge 2 ]] || usage; server=$2; shift ;;
    --server=*) server=${1#--server=} ;;
    --gpus) [[ $# -ge 2 ]] || usage; gpus=$2; shift ;;
    --gpus=*) gpus=${1#--gpus=} ;;
    -h | --help) usage ;;
    -*) die "unknown option $1" ;;
    *) [[ -z $dir ]] || die "one DIR only"; dir=$1 ;;
  esac
  shift
done
[[ -n $dir ]] || usage
[[ $state == seed || $state == fixed ]] || die "--state must be seed or fixed, not '$state'"
[[ $gpus =~ ^[1-9][0-9]?$ ]] || die "--gpus must be 1..99, not '$gpus'"
for b in ${breaks[@]+"${breaks[@]}"}; do
  case $b in
    loader_path | nvcc | ninja | headers | ptxas | link_stub) ;;
    *) die "--break: unknown problem '$b' (loader_path nvcc ninja headers ptxas link_stub)" ;;
  esac
  [[ $state == fixed ]] || die "--break needs --state fixed (the seed state has every problem)"
done
breaks_problem() {
  local b
  for b in ${breaks[@]+"${breaks[@]}"}; do [[ $b == "$1" ]] && return 0; done
  return 1
}
if [[ -z $server ]]; then
  for candidate in "${FLEET_BUILD_DIR:-}/tests/sim/sglang-server-sim" "$src/../../build/tests/sim/sglang-server-sim"; do
    if [[ -x $candidate ]]; then server=$candidate; break; fi
  done
fi
[[ -n $server && -x $server ]] || die "no sglang-server-sim binary (build it, or pass --server PATH)"
server=$(cd "$(dirname "$server")" && pwd)/$(basename "$server")

# The world's paths go into PATH-like variables and key=value files: refuse what would break them.
mkdir -p -- "$dir"
dir=$(cd -- "$dir" && pwd)
[[ $dir != *[:=$'\n']* ]] || die "DIR must not contain ':', '=' or a newline: $dir"
[[ -z $(ls -A -- "$dir") ]] || die "$dir is not empty"

venv="$dir/venv"
site="$venv/lib/python3.12/site-packages"
cuda="$site/nvidia/cu13"
driver_lib="$dir/usr/lib/x86_64-linux-gnu"

mkdir -p "$dir/bin" "$dir/etc" "$dir/sim/templates" "$dir/root" "$dir/logs" "$dir/models/tiny" \
  "$venv/bin" "$cuda/lib" "$cuda/include" "$cuda/bin" "$driver_lib"

# The shims' data, and the shims themselves.
cp "$src/pip-index.txt" "$dir/sim/pip-index.txt"
cp "$src/tools/fake-cuda-tool" "$src/tools/ninja" "$dir/sim/templates/"
: >"$dir/sim/apt-installed"
install -m 755 "$src/pip-sim" "$venv/bin/pip"
ln -s pip "$venv/bin/pip3"
install -m 755 "$src/apt-get-sim" "$dir/bin/apt-get"
install -m 755 "$src/tools/nvidia-smi" "$dir/bin/nvidia-smi"
# The container's C++ compiler, as the linker torch's cpp_extension runs (fake-cuda-tool's c++).
install -m 755 "$src/tools/fake-cuda-tool" "$dir/bin/c++"
ln -s "$server" "$venv/bin/python"
ln -s python "$venv/bin/python3"
ln -s "$server" "$venv/bin/vllm"
printf 'home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n' >"$venv/pyvenv.cfg"

# The container's GPU device nodes, as its LXC config passes them in (docs/config.md, GPUs in a
# Proxmox LXC container): nvidiaN (195:N), nvidiactl (195:255), nvidia-uvm and nvidia-uvm-tools
# (the driver picks their major; 235 here). Real character devices, made with mknod: only root may.
# Without them the world has no dev_root, and the agent's probe is not pointed at one.
dev_root=
if [[ $(id -u) -eq 0 ]] && mkdir -p "$dir/dev" && mknod -m 600 "$dir/dev/nvidiactl" c 195 255 2>/dev/null; then
  for ((i = 0; i < gpus; i++)); do mknod -m 600 "$dir/dev/nvidia$i" c 195 "$i"; done
  mknod -m 600 "$dir/dev/nvidia-uvm" c 235 0
  mknod -m 600 "$dir/dev/nvidia-uvm-tools" c 235 1
  dev_root=$dir/dev
else
  rm -rf -- "${dir:?}/dev"
  printf 'make_sim_world: no GPU device nodes (mknod needs root): the world has no dev_root\n' >&2
fi

{
  printf '# The simulated container world (tests/sim/make_sim_world.sh): key=value, one a line.\n'
  printf 'state=%s\n' "$state"
  printf 'breaks=%s\n' "${breaks[*]+${breaks[*]}}"
  printf 'root=%s\n' "$dir"
  printf 'venv=%s\n' "$venv"
  printf 'site_packages=%s\n' "$site"
  printf 'cuda_dir=%s\n' "$cuda"
  printf 'python=%s\n' "$venv/bin/python"
  printf 'vllm=%s\n' "$venv/bin/vllm"
  printf 'pip=%s\n' "$venv/bin/pip"
  printf 'apt_get=%s\n' "$dir/bin/apt-get"
  printf 'nvidia_smi=%s\n' "$dir/bin/nvidia-smi"
  printf 'model=%s\n' "$dir/models/tiny"
  printf 'gpus=%s\n' "$gpus"
  printf 'driver_libcuda=%s\n' "$driver_lib/libcuda.so.1"
  printf 'server_env=%s\n' "$dir/server.env"
  printf 'logs=%s\n' "$dir/logs"
  printf 'dev_root=%s\n' "$dev_root"
} >"$dir/sim-world.conf"

# The GPUs and the driver (the host's part: the container sees them, it cannot change them).
{
  printf '# index,name,compute_cap,memory_total_mib,uuid,pci_bus_id\n'
  for ((i = 0; i < gpus; i++)); do
    printf '%d,NVIDIA RTX PRO 6000 Blackwell Server Edition,12.0,97887,GPU-5e1f0c2a-7b3d-4c8e-9a10-%012d,00000000:%02X:00.0\n' \
      "$i" "$i" "$((i + 1))"
  done
} >"$dir/etc/nvidia-smi.csv"
printf 'driver_version=595.45.04\ncuda_version=13.2\n' >"$dir/etc/nvidia-driver.conf"
printf 'simulated file of a gpu-fleet sim world: libcuda.so.1 of the NVIDIA driver 595.45.04\n' \
  >"$driver_lib/libcuda.so.1"
# The container's loader cache as `ldconfig -p` prints it where the NVIDIA container runtime
# mounted the driver: the driver's libcuda.so.1, nothing of the CUDA toolkit (the seed's pip
# libraries are not in the cache: that is problem 1). A simulated container has no other cache.
{
  printf '#!/bin/sh\n# ldconfig of a gpu-fleet sim world (tests/sim/make_sim_world.sh): -p only.\n'
  printf 'if [ "$1" != "-p" ]; then echo "ldconfig: simulated: only -p is supported" >&2; exit 1; fi\n'
  printf 'printf %s\n' "'1 libs found in cache \`/etc/ld.so.cache'\''\\n'"
  printf 'printf %s\n' "'\\tlibcuda.so.1 (libc6,x86-64) => $driver_lib/libcuda.so.1\\n'"
} >"$dir/bin/ldconfig"
chmod 755 "$dir/bin/ldconfig"

cat >"$dir/models/tiny/config.json" <<'EOF'
{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 256,
  "intermediate_size": 688,
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 4,
  "max_position_embeddings": 4096,
  "vocab_size": 32000,
  "torch_dtype": "bfloat16"
}
EOF

pip=("$venv/bin/pip" install --quiet)
apt=("$dir/bin/apt-get" install -y -q)
base=(torch==2.9.1 sglang==0.5.6 sgl-kernel==0.3.18 flashinfer-python==0.5.3 vllm==0.11.0)
cuda_13_0=(nvidia-cuda-runtime==13.0.96 nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-cupti==13.0.85
  nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88)
cuda_13_2=(nvidia-cuda-nvcc==13.2.78 nvidia-cuda-runtime==13.2.75 nvidia-cuda-nvrtc==13.2.78
  nvidia-cuda-cupti==13.2.75 nvidia-cuda-crt==13.2.78 nvidia-nvvm==13.2.78)

server_env=(PATH="$venv/bin:$dir/bin" HOME="$dir/root")
if [[ $state == seed ]]; then
  # The seed: CUDA 13.0 runtime pieces, no compiler, no ninja, the bare pip layout (lib, no lib64,
  # no stub), and an environment that puts none of it on a search path.
  "${pip[@]}" "${base[@]}" "${cuda_13_0[@]}"
else
  # One pip run: the fixed set, where a broken problem pins other versions (later pins win).
  packages=("${base[@]}" "${cuda_13_2[@]}")
  # Compiler 13.2, headers 13.0: CCCL's compiler/header guard fails.
  if breaks_problem headers; then packages+=(nvidia-cuda-runtime==13.0.96); fi
  # Everything 13.0 (compiler and headers agree): ptxas accepts PTX ISA 9.0 at most.
  if breaks_problem ptxas; then packages+=(nvidia-cuda-nvcc==13.0.88 "${cuda_13_0[@]}"); fi
  declare -A pinned=()
  for p in "${packages[@]}"; do pinned[${p%%==*}]=$p; done
  if breaks_problem nvcc; then unset 'pinned[nvidia-cuda-nvcc]'; fi
  "${pip[@]}" "${pinned[@]}"
  breaks_problem ninja || "${apt[@]}" ninja-build >/dev/null
  # The link layout flashinfer's link line expects: lib64, an unversioned libcudart.so, and a
  # libcuda stub (here the driver's library, which links as well as a stub).
  if ! breaks_problem link_stub; then
    ln -s lib "$cuda/lib64"
    ln -s libcudart.so.13 "$cuda/lib/libcudart.so"
    mkdir -p "$cuda/lib/stubs"
    ln -s "$driver_lib/libcuda.so.1" "$cuda/lib/stubs/libcuda.so"
  fi
  server_env=(PATH="$cuda/bin:$venv/bin:$dir/bin" HOME="$dir/root" CUDA_HOME="$cuda")
  breaks_problem loader_path || server_env+=(LD_LIBRARY_PATH="$cuda/lib")
fi

{
  printf '# Environment of a server in this world (key=value, one a line; not a shell script).\n'
  printf '%s\n' "${server_env[@]}"
} >"$dir/server.env"

printf 'make_sim_world: %s world (%s%s) in %s\n' "$state" "$gpus GPUs" \
  "${breaks[*]+, broken: ${breaks[*]}}" "$dir"
