#!/usr/bin/env python3
"""A small, real inference server for gpu-fleet's real-GPU runs (deploy/gpu-run.sh).

It does what a real SGLang + flashinfer start does, on the machine's own PyTorch:

  1. JIT-compiles a CUDA extension (csrc/) with torch.utils.cpp_extension.load: ninja + nvcc +
     ptxas + the host linker, the pipeline flashinfer uses, its build output passed through
     verbatim (ninja's "[1/3] ..." lines, nvcc/ptxas/ld errors);
  2. builds a small transformer (embedding, 2 blocks of RMSNorm + attention + MLP, bf16) with
     random weights from a fixed seed on its GPU ("Load weight begin" / "Load weight end");
  3. captures the decode forward in a CUDA graph ("Capture cuda graph begin" / "end");
  4. serves HTTP (stdlib ThreadingHTTPServer): GET /health (200 once loaded), GET
     /health_generate (a real forward pass on the GPU), POST /v1/completions (greedy, minimal),
     and logs SGLang's "The server is fired up and ready to roll!".

It speaks SGLang's flags (`--model-path PATH|random --host H --port N`) and log lines, so
gpu-fleet's classifier (common/diagnosis/signatures.conf) follows its phases. A failure is the
real thing: the Python traceback of the real error, exit status 1.

Fault switches (FLEET_GPU_FAULT, a comma list; `NAME@GPU` limits one to the server whose
CUDA_VISIBLE_DEVICES is GPU), each failing with the real tools' own output:
  ptx_newer   the build hands ptxas a PTX module whose .version is one above what this ptxas
              accepts (nvcc -Xptxas=FILE.ptx): "ptxas ... fatal : Unsupported .version X.Y;
              current version is 'A.B'", then torch's "Error building extension 'fleet_ops'"
  needs_stub  the extension calls the driver API and links with -L$CUDA_HOME/lib64/stubs -lcuda:
              where that stub is missing, ld fails ("cannot find -lcuda", collect2); a
              libcuda.so put there (a link to the driver's libcuda.so.1) cures it. Where a
              libcuda.so elsewhere would satisfy -lcuda, the link asks for it with -Bstatic
              while the stub is missing, so it still fails the same way
  oom         after the weights, allocates twice the GPU's memory: torch.OutOfMemoryError
  leftover    after the weights, starts a child (a fresh python) that leaves the server's process
              group (same session) and holds FLEET_GPU_LEFTOVER_GIB (default 4) GiB of the GPU
              until killed: a server killed with SIGKILL leaves it behind, as a real server's
              stray worker would, for the next launch on that GPU to find (deploy/gpu-run.sh
              scenario leftover)
Ninja missing from PATH and a wrong CUDA_HOME need no switch: set the environment, and torch
fails as it does ("Ninja is required to load C++ extensions", ".../bin/nvcc: not found").
See README.md beside this file.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
EXTENSION = "fleet_ops"
KNOWN_FAULTS = ("ptx_newer", "needs_stub", "oom", "leftover")

# The `leftover` fault's child: CUDA on the server's GPU (CUDA_VISIBLE_DEVICES is inherited),
# GIB of it held, "ready" on stdout, then nothing until killed.
LEFTOVER_CHILD = r"""
import signal, sys
import torch
torch.cuda.set_device(0)
hold = torch.empty(int(float(sys.argv[1]) * (1 << 30)), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
sys.stdout.write("ready\n")
sys.stdout.flush()
while True:
    signal.pause()
"""

# CUDA release -> the highest PTX ISA its ptxas accepts (PTX ISA release notes). Checked against
# the real ptxas at run time, so a release missing here still works.
PTX_ISA_OF_RELEASE = {
    (11, 0): (7, 0), (11, 1): (7, 1), (11, 2): (7, 2), (11, 3): (7, 3), (11, 4): (7, 4),
    (11, 5): (7, 5), (11, 6): (7, 6), (11, 7): (7, 7), (11, 8): (7, 8),
    (12, 0): (8, 0), (12, 1): (8, 1), (12, 2): (8, 2), (12, 3): (8, 3), (12, 4): (8, 4),
    (12, 5): (8, 5), (12, 6): (8, 5), (12, 8): (8, 7), (12, 9): (8, 8),
    (13, 0): (9, 0), (13, 1): (9, 1), (13, 2): (9, 2),
}


# --- Logging: SGLang's shape ----------------------------------------------------------------------

def log(message, tp=True):
    """One line to stdout, SGLang-style: `[2025-01-01 12:00:00 TP0] message`."""
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}{' TP0' if tp else ''}] {message}", flush=True)


def gib(n_bytes):
    return n_bytes / (1 << 30)


# --- Arguments and faults -------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(
        description="gpu-fleet's real-GPU example server (SGLang-like flags)")
    p.add_argument("--model-path", required=True,
                   help="'random' (built-in small config) or a directory with a config.json "
                        "(hidden_size, num_hidden_layers, num_attention_heads, vocab_size, "
                        "intermediate_size); weights are random (fixed seed) either way")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--jit-dir", default=None,
                   help="where the extension is built (default: TORCH_EXTENSIONS_DIR, else "
                        "torch's default under ~/.cache/torch_extensions)")
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    # SGLang flags a supervisor may add; accepted, and ignored with a note.
    p.add_argument("--attention-backend", default=None)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--tp-size", "--tp", type=int, default=1)
    p.add_argument("--disable-piecewise-cuda-graph", action="store_true")
    return p.parse_known_args(argv)


def parse_faults(text, gpu):
    """FLEET_GPU_FAULT: `a,b,c@3` -> the set of faults that apply to this GPU."""
    faults = set()
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, _, only = item.partition("@")
        if name not in KNOWN_FAULTS:
            raise SystemExit(f"fleet server: FLEET_GPU_FAULT: unknown fault {name!r} "
                             f"(known: {', '.join(KNOWN_FAULTS)})")
        if only and only != gpu:
            continue
        faults.add(name)
    return faults


# --- The fault hooks' helpers ---------------------------------------------------------------------

def find_ptxas(cuda_home):
    """The ptxas that nvcc will run: the one beside $CUDA_HOME/bin/nvcc, else the one on PATH."""
    if cuda_home:
        candidate = os.path.join(cuda_home, "bin", "ptxas")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("ptxas")


def ptxas_rejects(ptxas, isa, workdir):
    """True when this ptxas refuses PTX `.version isa` (runs it on a tiny module)."""
    path = os.path.join(workdir, "probe_%d_%d.ptx" % isa)
    with open(path, "w") as f:
        f.write(ptx_module(isa, "fleet_isa_probe"))
    ran = subprocess.run([ptxas, "-arch=sm_90", path, "-o", os.devnull],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return ran.returncode != 0 and "Unsupported .version" in ran.stdout


def ptx_module(isa, entry):
    return (f".version {isa[0]}.{isa[1]}\n.target sm_90\n.address_size 64\n\n"
            f".visible .entry {entry}()\n{{\n\tret;\n}}\n")


def next_isa(isa):
    return (isa[0] + 1, 0) if isa[1] >= 9 else (isa[0], isa[1] + 1)


def newer_isa_ptx(cuda_home, fault_dir):
    """Writes a PTX module one ISA version above what this machine's ptxas accepts; returns
    (path, wanted, supported, ptxas). The version comes from `ptxas --version` (release -> ISA),
    checked by running ptxas, so it fails on whatever CUDA the machine has."""
    ptxas = find_ptxas(cuda_home)
    if ptxas is None:
        return None
    banner = subprocess.run([ptxas, "--version"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True).stdout
    m = re.search(r"release (\d+)\.(\d+)", banner)
    release = (int(m.group(1)), int(m.group(2))) if m else None
    supported = PTX_ISA_OF_RELEASE.get(release)
    if supported is None:  # unknown release: the lowest guess, then upwards
        supported = (release[0] - 5, release[1]) if release else (7, 0)
    wanted = next_isa(supported)
    for _ in range(40):  # the table is checked, never trusted: step up until ptxas refuses
        if ptxas_rejects(ptxas, wanted, fault_dir):
            break
        supported, wanted = wanted, next_isa(wanted)
    path = os.path.join(fault_dir, "fleet_newer_isa.ptx")
    with open(path, "w") as f:
        f.write(ptx_module(wanted, "fleet_newer_isa"))
    return path, wanted, supported, ptxas


def cuda_links_without(stub_dir, workdir):
    """True when `-lcuda` links even without stub_dir (LIBRARY_PATH or a system libcuda.so)."""
    cxx = os.environ.get("CXX", "c++")
    src = os.path.join(workdir, "empty.cpp")
    with open(src, "w") as f:
        f.write("int fleet_probe;\n")
    try:
        ran = subprocess.run([cxx, "-shared", "-fPIC", src, "-o",
                              os.path.join(workdir, "probe.so"), "-lcuda"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError:
        return False
    return ran.returncode == 0


# --- The JIT build ------------------------------------------------------------------------------

def default_jit_dir(torch):
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root:
        return root
    cu = (torch.version.cuda or "cpu").replace(".", "")
    return os.path.join(os.path.expanduser("~"), ".cache", "torch_extensions",
                        f"py{sys.version_info[0]}{sys.version_info[1]}_cu{cu}")


def build_extension(torch, args, faults):
    from torch.utils import cpp_extension

    jit_dir = os.path.abspath(args.jit_dir or default_jit_dir(torch))
    build_dir = os.path.join(jit_dir, EXTENSION)
    fault_dir = os.path.join(jit_dir, EXTENSION + "_faults")
    os.makedirs(build_dir, exist_ok=True)
    os.makedirs(fault_dir, exist_ok=True)
    cuda_home = cpp_extension.CUDA_HOME
    extra_cflags = ["-O2"]
    extra_cuda_cflags = ["-O2", "-lineinfo"]
    extra_ldflags = []

    if "ptx_newer" in faults:
        made = newer_isa_ptx(cuda_home, fault_dir)
        if made is None:
            log("fleet fault ptx_newer: no ptxas beside CUDA_HOME or on PATH; the build "
                "fails before ptxas anyway")
        else:
            path, wanted, supported, ptxas = made
            if "," in path:
                raise SystemExit(f"fleet server: {path}: a ',' in the path breaks -Xptxas")
            log(f"fleet fault ptx_newer: {ptxas} accepts PTX ISA {supported[0]}.{supported[1]}; "
                f"the build also hands it {path} (ISA {wanted[0]}.{wanted[1]})")
            extra_cuda_cflags.append("-Xptxas=" + path)

    if "needs_stub" in faults:
        stub_dir = os.path.join(cuda_home or "/nonexistent-cuda-home", "lib64", "stubs")
        extra_cflags.append("-DFLEET_USE_DRIVER_API")
        if os.path.exists(os.path.join(stub_dir, "libcuda.so")):
            log(f"fleet fault needs_stub: the extension calls the driver API, linked with "
                f"-L{stub_dir} -lcuda (the stub is there)")
            extra_ldflags += ["-L" + stub_dir, "-lcuda"]
        elif not cuda_links_without(stub_dir, fault_dir):
            log(f"fleet fault needs_stub: the extension calls the driver API, linked with "
                f"-L{stub_dir} -lcuda (no stub there)")
            extra_ldflags += ["-L" + stub_dir, "-lcuda"]
        else:
            # A libcuda.so outside the stub folder (LIBRARY_PATH, a driver's /lib/libcuda.so)
            # would satisfy -lcuda. While the stub is missing, -lcuda is looked up as a static
            # library only (none exists anywhere), so ld still fails as a missing stub does
            # ("cannot find -lcuda"); once the stub is there, the branch above links it.
            log(f"fleet fault needs_stub: -lcuda would resolve outside {stub_dir} here "
                f"(LIBRARY_PATH or a system libcuda.so); while the stub is missing the link "
                f"asks for -lcuda with -Bstatic")
            extra_ldflags += ["-L" + stub_dir, "-Wl,-Bstatic", "-lcuda", "-Wl,-Bdynamic"]

    sources = [os.path.join(HERE, "csrc", "fleet_ops.cpp"),
               os.path.join(HERE, "csrc", "fleet_ops_kernel.cu")]
    log(f"CUDA_HOME={cuda_home} TORCH_EXTENSIONS_DIR={jit_dir} MAX_JOBS="
        f"{os.environ.get('MAX_JOBS', '(ninja default)')}")
    # flashinfer's line: gpu-fleet's classifier enters JIT_COMPILING(fleet_ops) here.
    log(f"flashinfer.jit: Loading JIT ops: {EXTENSION}")
    started = time.monotonic()
    module = cpp_extension.load(
        name=EXTENSION,
        sources=sources,
        extra_cflags=extra_cflags,
        extra_cuda_cflags=extra_cuda_cflags,
        extra_ldflags=extra_ldflags,
        build_directory=build_dir,
        verbose=True,  # ninja -v: every command and every tool's own output reach the log
    )
    log(f"flashinfer.jit: Finished loading JIT ops: {EXTENSION} "
        f"({time.monotonic() - started:.1f} s)")
    return module


# --- The model -------------------------------------------------------------------------------------

def model_config(path):
    config = {"vocab_size": 8192, "hidden_size": 1024, "num_hidden_layers": 2,
              "num_attention_heads": 8, "intermediate_size": 2816, "rms_norm_eps": 1e-6}
    if path != "random":
        with open(os.path.join(path, "config.json")) as f:  # FileNotFoundError: the real one
            given = json.load(f)
        for key in config:
            if key in given:
                config[key] = type(config[key])(given[key])
    return config


def build_model(torch, ops, config, dtype, seed):
    nn = torch.nn
    F = torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self, hidden, eps):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden))
            self.eps = eps

        def forward(self, x, residual=None):
            shape = x.shape
            x2 = x.reshape(-1, shape[-1]).contiguous()
            if residual is None:
                return ops.rmsnorm(x2, self.weight, self.eps).view(shape)
            r2 = residual.reshape(-1, shape[-1])
            return ops.add_rmsnorm(x2, r2, self.weight, self.eps).view(shape)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            h = config["hidden_size"]
            self.heads = config["num_attention_heads"]
            self.attn_norm = RMSNorm(h, config["rms_norm_eps"])
            self.qkv = nn.Linear(h, 3 * h, bias=False)
            self.o = nn.Linear(h, h, bias=False)
            self.mlp_norm = RMSNorm(h, config["rms_norm_eps"])
            self.gate_up = nn.Linear(h, 2 * config["intermediate_size"], bias=False)
            self.down = nn.Linear(config["intermediate_size"], h, bias=False)

        def forward(self, x):
            b, t, h = x.shape
            q, k, v = self.qkv(self.attn_norm(x)).split(h, dim=-1)
            q, k, v = (z.view(b, t, self.heads, h // self.heads).transpose(1, 2)
                       for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, h))
            gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(config["vocab_size"], config["hidden_size"])
            self.blocks = nn.ModuleList(Block() for _ in range(config["num_hidden_layers"]))
            self.norm = RMSNorm(config["hidden_size"], config["rms_norm_eps"])

        def forward(self, ids):
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x)
            return self.norm(x) @ self.embed.weight.t()  # tied LM head

    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = TinyLM()
    for p in model.parameters():  # small weights keep bf16 activations finite
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=0.02)
    return model.to(dtype).eval()


class Engine:
    """The model, a lock (one forward at a time) and, unless disabled, a captured graph of a
    fixed-length forward for /health_generate."""

    GRAPH_LEN = 16

    def __init__(self, torch, model, config, use_graph):
        self.torch = torch
        self.model = model
        self.vocab = config["vocab_size"]
        self.lock = threading.Lock()
        self.graph = None
        self.static_ids = torch.zeros(1, self.GRAPH_LEN, dtype=torch.long, device="cuda")
        self.static_out = None
        if use_graph:
            self.capture()

    def capture(self):
        torch = self.torch
        free, _ = torch.cuda.mem_get_info()
        log(f"Capture cuda graph begin. This can take up to several minutes. "
            f"avail mem={gib(free):.2f} GB")
        started = time.monotonic()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(side):
            for _ in range(3):
                self.model(self.static_ids)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph):
            self.static_out = self.model(self.static_ids)
        torch.cuda.synchronize()
        self.graph = graph
        free_after, _ = torch.cuda.mem_get_info()
        log(f"Capture cuda graph end. Time elapsed: {time.monotonic() - started:.2f} s. "
            f"mem usage={gib(free - free_after):.2f} GB. avail mem={gib(free_after):.2f} GB.")

    def tokens(self, text):
        ids = [b % self.vocab for b in text.encode("utf-8")] or [0]
        return ids

    @staticmethod
    def detokenize(ids):
        return "".join(chr(32 + i % 95) for i in ids)

    def health_generate(self):
        """One real forward on the GPU: the graph when captured, else eager."""
        torch = self.torch
        with self.lock, torch.inference_mode():
            ids = torch.arange(self.GRAPH_LEN, device="cuda").remainder(self.vocab).view(1, -1)
            if self.graph is not None:
                self.static_ids.copy_(ids)
                self.graph.replay()
                logits = self.static_out
            else:
                logits = self.model(ids)
            token = int(logits[0, -1].float().argmax())
            finite = bool(torch.isfinite(logits).all())
        return {"ok": finite, "next_token": token, "graph": self.graph is not None}

    def generate(self, prompt, max_tokens):
        torch = self.torch
        ids = self.tokens(prompt)[-512:]
        out = []
        with self.lock, torch.inference_mode():
            seq = torch.tensor([ids], dtype=torch.long, device="cuda")
            for _ in range(max_tokens):
                logits = self.model(seq)
                nxt = int(logits[0, -1].float().argmax())
                out.append(nxt)
                seq = torch.cat([seq, torch.tensor([[nxt]], device="cuda")], dim=1)
        return self.detokenize(out), len(ids)


# --- HTTP ----------------------------------------------------------------------------------------

class QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that hangs up (a probe's timeout, curl -f on a 503) is no server error: no
        # traceback in the log, where it would read like a failure.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class State:
    loaded = False
    ready = False
    engine = None
    model_name = "random"


def make_handler(state):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            # One SGLang-like line per request, but none for the health probes: a supervisor
            # polls them every second, and a line per poll would look like startup progress.
            if self.path.split("?", 1)[0] in ("/health", "/health_generate"):
                return
            log(f'{self.address_string()} - "{self.requestline}" {a[1] if len(a) > 1 else ""}',
                tp=False)

        def reply(self, code, body):
            data = json.dumps(body).encode() if not isinstance(body, bytes) else body
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self.reply(200 if state.loaded else 503, b"" if state.loaded else b"{}")
            elif path == "/health_generate":
                if not state.ready:
                    self.reply(503, {"error": "not ready"})
                    return
                try:
                    result = state.engine.health_generate()
                except Exception as e:  # a GPU fault after start: 500, and the log says why
                    traceback.print_exc()
                    self.reply(500, {"error": repr(e)})
                    return
                self.reply(200 if result["ok"] else 500, result)
            elif path == "/v1/models":
                self.reply(200, {"object": "list", "data": [
                    {"id": state.model_name, "object": "model", "owned_by": "gpu-fleet"}]})
            elif path == "/get_model_info":
                self.reply(200, {"model_path": state.model_name, "is_generation": True})
            else:
                self.reply(404, {"error": f"no route {path}"})

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length > 0 else b""
            if path not in ("/v1/completions", "/generate"):
                self.reply(404, {"error": f"no route {path}"})
                return
            if not state.ready:
                self.reply(503, {"error": "not ready"})
                return
            try:
                body = json.loads(raw or b"{}")
                prompt = body.get("prompt", body.get("text", ""))
                if isinstance(prompt, list):
                    prompt = prompt[0] if prompt else ""
                params = body.get("sampling_params", {})
                max_tokens = int(body.get("max_tokens", params.get("max_new_tokens", 8)))
                max_tokens = max(1, min(max_tokens, 64))
            except (ValueError, TypeError, AttributeError) as e:
                self.reply(400, {"error": f"bad request: {e}"})
                return
            text, n_prompt = state.engine.generate(str(prompt), max_tokens)
            if path == "/generate":
                self.reply(200, {"text": text, "meta_info": {
                    "prompt_tokens": n_prompt, "completion_tokens": max_tokens}})
                return
            self.reply(200, {
                "id": "cmpl-%d" % time.time_ns(), "object": "text_completion",
                "created": int(time.time()), "model": state.model_name,
                "choices": [{"index": 0, "text": text, "logprobs": None,
                             "finish_reason": "length"}],
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": max_tokens,
                          "total_tokens": n_prompt + max_tokens}})

    return Handler


# --- Main ----------------------------------------------------------------------------------------

class Terminated(BaseException):
    """SIGTERM/SIGINT, raised in the main thread: unwinds (torch's build lock is released),
    then the process ends by the same signal."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def on_signal(signum, _frame):
    raise Terminated(signum)


def start_leftover(gib):
    """The `leftover` fault: a child in a process group of its own (the server's session) holding
    `gib` GiB of this GPU. Returns once it holds them."""
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {
        "preexec_fn": lambda: os.setpgid(0, 0)}
    child = subprocess.Popen([sys.executable, "-c", LEFTOVER_CHILD, str(gib)],
                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             env=dict(os.environ, FLEET_GPU_LEFTOVER="1"), **group)
    if child.stdout.readline().strip() != b"ready":
        raise RuntimeError(f"the leftover child (pid {child.pid}) did not start: "
                           f"exit {child.wait()}")
    log(f"fleet fault leftover: child pid {child.pid} (its own process group, this server's "
        f"session) holds {gib:.1f} GiB of this GPU until killed")


def main(argv):
    args, unknown = parse_args(argv)
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    faults = parse_faults(os.environ.get("FLEET_GPU_FAULT", ""), gpu)
    log(f"server_args=ServerArgs(model_path={args.model_path!r}, host={args.host!r}, "
        f"port={args.port}, jit_dir={args.jit_dir!r}, dtype={args.dtype!r}, "
        f"disable_cuda_graph={args.disable_cuda_graph}, faults={sorted(faults)}, "
        f"cuda_visible_devices={gpu!r})", tp=False)
    if unknown:
        log(f"ignoring arguments this example does not implement: {' '.join(unknown)}",
            tp=False)
    for flag in ("attention_backend", "mem_fraction_static"):
        if getattr(args, flag) is not None:
            log(f"--{flag.replace('_', '-')} accepted and ignored (one attention path here)",
                tp=False)

    try:
        import torch
    except ImportError as e:
        raise SystemExit(
            f"fleet server: PyTorch is not importable by {sys.executable} ({e}). This server "
            f"needs the machine's PyTorch with CUDA; start it with the python that has it.")

    # Bind first: a port in use fails at once ("[Errno 98] Address already in use").
    state = State()
    state.model_name = args.model_path
    httpd = QuietHTTPServer((args.host, args.port), make_handler(state))
    threading.Thread(target=httpd.serve_forever, name="http", daemon=True).start()

    log(f"PyTorch {torch.__version__}, CUDA runtime version {torch.version.cuda}, "
        f"python {sys.version.split()[0]}", tp=False)
    torch.cuda.init()  # torch's own error where the GPU or its driver cannot be reached
    torch.cuda.set_device(0)
    props = torch.cuda.get_device_properties(0)
    # Which physical GPU device 0 is (uuid and PCI bus where this torch tells them): with
    # CUDA_DEVICE_ORDER=PCI_BUS_ID it is nvidia-smi's GPU CUDA_VISIBLE_DEVICES.
    ident = ""
    if getattr(props, "uuid", None) is not None:
        ident += f", uuid GPU-{props.uuid}"
    if getattr(props, "pci_bus_id", None) is not None:
        ident += (f", pci {getattr(props, 'pci_domain_id', 0):08x}:{props.pci_bus_id:02x}:"
                  f"{getattr(props, 'pci_device_id', 0):02x}.0")
    log(f"GPU: {props.name}, compute capability {props.major}.{props.minor}, "
        f"total capacity of {gib(props.total_memory):.2f} GiB{ident}, "
        f"CUDA_DEVICE_ORDER={os.environ.get('CUDA_DEVICE_ORDER', '(unset: fastest first)')}")

    # The kernels the model runs come from the JIT extension, built first (the model's layers
    # need them, as SGLang's need flashinfer's ops).
    ops = build_extension(torch, args, faults)

    dtype = getattr(torch, args.dtype)
    config = model_config(args.model_path)
    free, _ = torch.cuda.mem_get_info()
    log(f"Load weight begin. avail mem={gib(free):.2f} GB")
    started = time.monotonic()
    model = build_model(torch, ops, config, dtype, args.seed)
    torch.cuda.synchronize()
    free_after, _ = torch.cuda.mem_get_info()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"Load weight end. type=TinyLM, dtype={dtype}, params={n_params / 1e6:.1f}M, "
        f"avail mem={gib(free_after):.2f} GB, mem usage={gib(free - free_after):.2f} GB, "
        f"elapsed={time.monotonic() - started:.2f} s.")
    if "needs_stub" in faults:
        log(f"driver API through -lcuda: cuDriverGetVersion = {ops.driver_version()}")
    if "leftover" in faults:
        start_leftover(float(os.environ.get("FLEET_GPU_LEFTOVER_GIB", "4")))
    state.loaded = True

    if "oom" in faults:
        total = props.total_memory
        log(f"fleet fault oom: allocating the KV cache at twice the GPU's memory "
            f"({gib(2 * total):.2f} GiB)")
        torch.empty(2 * total, dtype=torch.uint8, device="cuda")

    state.engine = Engine(torch, model, config, use_graph=not args.disable_cuda_graph)
    first = state.engine.health_generate()
    if not first["ok"]:
        raise RuntimeError(f"the first forward pass gave non-finite logits: {first}")
    state.ready = True
    log(f"The server is fired up and ready to roll! (http://{args.host}:{args.port})", tp=False)
    # Until SIGTERM/SIGINT. A short sleep, not one long wait: the kernel may deliver the signal
    # to another thread (CUDA's, the HTTP server's), and Python runs its handler only when the
    # main thread next executes bytecode.
    while True:
        time.sleep(0.5)


def run():
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        main(sys.argv[1:])
    except Terminated as t:
        log(f"received signal {t.signum}, exiting", tp=False)
        sys.stdout.flush()
        signal.signal(t.signum, signal.SIG_DFL)
        os.kill(os.getpid(), t.signum)
        os._exit(128 + t.signum)
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()  # the real error, with its traceback, as SGLang's scheduler does
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)  # no lingering non-daemon threads (the HTTP server, CUDA's)


if __name__ == "__main__":
    run()
