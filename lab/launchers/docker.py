"""Docker launcher: one container per pass, through the docker SDK (imported lazily).

The container runs ``python -u -m lab.passes.runner /work/pass/pass.container.json``, a copy
of the host's ``pass.json`` with container paths: the pass folder is mounted writable at
/work/pass, the corpus read-only under /data, a local model folder read-only at
/models/model. The network is off during the pass (``network_mode="none"``; a model is
fetched beforehand, as a separate setup step). GPU access comes from
``lab.launchers.gpu_access`` (compose.yaml mirrors it). The stdout stream is split into
whole decoded lines (chunks are not lines) and fed to ``on_line`` exactly as the local
launcher does; stderr goes to the pass log. A pass over N cards is the same command in
one container holding the N devices: the runner starts its workers under torchrun inside
(``lab.passes.multicard``). After exit: wait, reload, read ExitCode and State.OOMKilled,
then remove the container (never auto-remove, which would lose the state). A container
killed for host memory is ``killed_host_memory=True`` ("killed, host memory"), distinct
from a CUDA/HIP OOM the pass reports itself (exit code 3). Files the pass wrote
(predictions of the items completed) stay in the pass folder.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from lab.facts.errors import LabError
from lab.facts.files import REPO_ROOT, lab_sources_sha256
from lab.facts.host import IMAGE_KEYS, NO_DRIVER_MARK, detect_vendor, read_pins, rocm_device_gids, toolkit_fix
from lab.launchers.base import LaunchOutcome, LineSink, limit_reason
from lab.launchers.gpu_access import gpu_run_kwargs
from lab.passes.spec import PassSpec

C_PASS, C_DATA, C_MODEL, C_OUT = "/work/pass", "/data", "/models/model", "/work/out"
C_TASK = "/work/task"  # a custom task's entry folder, read-only (its entry file and the files it declares)
C_SPEC_NAME = "pass.container.json"
LABEL_PREFIX = "iteralab"
DEFAULT_MEMORY_FRACTION = 0.9     # of host RAM: a runaway pass cannot take the host down
DEFAULT_PIDS_LIMIT = 4096         # threads count as pids: tokenizers and torch start many
DEFAULT_TMPFS_BYTES = 2 << 30     # /tmp inside the read-only container


def iter_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Whole lines from a byte stream cut anywhere (even inside a UTF-8 character).

    Yields each line decoded as UTF-8 (invalid bytes replaced), without its newline; a
    last line without a newline is yielded when the stream ends.
    """
    buf = b""
    for chunk in chunks:
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            yield raw.rstrip(b"\r").decode("utf-8", "replace")
    if buf:
        yield buf.rstrip(b"\r").decode("utf-8", "replace")


def unreadable_for(path: Path, uid: int, gid: int, limit: int = 3) -> list[str]:
    """Files (and folders) under ``path`` that uid:gid cannot read, by their mode bits.

    A folder also needs the execute bit. Supplementary groups are not considered.
    Returns at most ``limit`` paths.
    """
    bad: list[str] = []
    paths = [path] + (sorted(path.rglob("*")) if path.is_dir() else [])
    for p in paths:
        st = p.stat()
        if st.st_uid == uid:
            r, x = stat.S_IRUSR, stat.S_IXUSR
        elif st.st_gid == gid:
            r, x = stat.S_IRGRP, stat.S_IXGRP
        else:
            r, x = stat.S_IROTH, stat.S_IXOTH
        need = r | (x if p.is_dir() else 0)
        if st.st_mode & need != need:
            bad.append(f"{p} (mode {stat.S_IMODE(st.st_mode):04o}, owner {st.st_uid}:{st.st_gid})")
            if len(bad) >= limit:
                break
    return bad


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, uid, gid, follow_symlinks=False)


LAB_SHA256_LABEL = "iteralab.lab-sha256"


class ImageOutdated(LabError, RuntimeError):
    """A pass image built from another version of the lab's sources than this bundle's."""


def check_image_sources(image: str, labels: dict, root: Path = REPO_ROOT) -> None:
    """Refuse an image whose ``iteralab.lab-sha256`` label (the lab sources it was built from,
    lab.facts.files.lab_sources_sha256) is missing or is not this bundle's: its passes would run
    other code than the one the campaign was locked with (every pass of a campaign crashed on a
    pass spec the old code could not read). Raises ImageOutdated with the fix."""
    have, want = labels.get(LAB_SHA256_LABEL), lab_sources_sha256(root)
    if have != want:
        built = f"lab sources {have[:12]}" if have else "no lab sources label"
        raise ImageOutdated(f"image {image} was built from another version of the lab ({built}; this bundle's "
                            f"are {want[:12]}); rebuild it: `make images` (or scripts/ci_docker.sh where no "
                            "registry is reachable)")


class DockerLauncher:
    """Runs each pass in a fresh container of ``image``.

    ``vendor``: "cpu", "nvidia" or "rocm" (GPU access, gpu_access.gpu_run_kwargs).
    ``mem_limit_bytes``: container memory limit (swap included), None = unlimited.
    ``shm_size_bytes``: /dev/shm size. ``hf_home``: a host Hugging Face cache mounted
    read-only for hub model ids. ``labels``: extra labels on every container.
    ``client``: a docker.DockerClient (default: ``docker.from_env()``).
    ``timeout_s``: a pass still running after this many seconds is stopped (None = no limit).
    ``stall_s``: a pass that writes no event line for this many seconds is stopped.

    Containers are confined (all recorded by ``describe``): read-only root filesystem with a
    writable pass folder and a ``/tmp`` tmpfs of ``tmpfs_bytes``; all capabilities dropped;
    ``no-new-privileges``; at most ``pids_limit`` processes; a memory limit, by default
    ``DEFAULT_MEMORY_FRACTION`` of the host's RAM (``mem_limit_bytes`` overrides it).
    """

    name = "docker"

    def __init__(self, image: str, vendor: str = "cpu", mem_limit_bytes: int | None = None,
                 shm_size_bytes: int = 1 << 30, hf_home: str | None = None,
                 labels: dict | None = None, client=None, stop_timeout_s: int = 10,
                 timeout_s: float | None = None, stall_s: float | None = None,
                 pids_limit: int = DEFAULT_PIDS_LIMIT, tmpfs_bytes: int = DEFAULT_TMPFS_BYTES):
        import docker
        import psutil

        gpu_run_kwargs(vendor)  # ValueError for an unknown vendor
        self.client = client or docker.from_env()
        self.image_ref, self.vendor = image, vendor
        self.mem_limit_rule = "given by the caller (--memory-limit)"
        if mem_limit_bytes is None:
            mem_limit_bytes = int(psutil.virtual_memory().total * DEFAULT_MEMORY_FRACTION)
            self.mem_limit_rule = f"default: {DEFAULT_MEMORY_FRACTION:.0%} of host RAM (psutil.virtual_memory().total)"
        self.mem_limit_bytes, self.shm_size_bytes = mem_limit_bytes, shm_size_bytes
        self.pids_limit, self.tmpfs_bytes = pids_limit, tmpfs_bytes
        self.hf_home, self.labels, self.stop_timeout_s = hf_home, dict(labels or {}), stop_timeout_s
        self.timeout_s, self.stall_s = timeout_s, stall_s
        self.image = self.client.images.get(image)  # docker.errors.ImageNotFound when not built

    @classmethod
    def from_environment(cls, mem_limit_bytes: int | None = None, image: str | None = None,
                         vendor: str | None = None, **kw) -> "DockerLauncher":
        """Launcher for this host: engine from DOCKER_HOST (or the default socket), vendor
        from ITERALAB_GPU_VENDOR or the GPUs found (lab.facts.host.detect_vendor), image from
        ITERALAB_IMAGE or images/pins.env. Raises RuntimeError with the fix when the
        engine does not answer or the image is not built.
        """
        import docker

        vendor = vendor or os.environ.get("ITERALAB_GPU_VENDOR") or detect_vendor()
        image = image or os.environ.get("ITERALAB_IMAGE") or read_pins()[IMAGE_KEYS[vendor]]
        try:
            client = docker.from_env()
            client.ping()
        except Exception as exc:
            raise RuntimeError(f"no Docker engine answers ({exc}); start dockerd, or use the local "
                               "launcher (no container isolation)") from None
        try:
            launcher = cls(image, vendor, mem_limit_bytes, client=client, **kw)
        except docker.errors.ImageNotFound:
            raise RuntimeError(f"image {image} is not built on this host; run `make images` "
                               "(or scripts/ci_docker.sh where no registry is reachable)") from None
        check_image_sources(image, launcher.image.labels or {})
        return launcher

    # ---- facts -----------------------------------------------------------------------
    def describe(self) -> dict:
        """Manifest facts: image tag, id and RepoDigests, base image, engine, runtime, limits."""
        info, ver = self.client.info(), self.client.version()
        a = self.image.attrs
        return {"launcher": "docker", "isolation": self._isolation(),
                "image": self.image_ref, "image_id": self.image.id,
                "image_repo_digests": a.get("RepoDigests") or [],
                "image_digest_note": "" if a.get("RepoDigests") else
                "built on this host, never pushed or pulled: the image id is its content digest",
                "image_base": (a.get("Config", {}).get("Labels") or {}).get("iteralab.base-image", ""),
                "image_created": a.get("Created", ""),
                "engine_version": ver.get("Version", ""), "engine_api_version": ver.get("ApiVersion", ""),
                "runtime": info.get("DefaultRuntime", ""), "runtimes": sorted(info.get("Runtimes") or {}),
                "cgroup_version": info.get("CgroupVersion", ""), "storage_driver": info.get("Driver", ""),
                "vendor": self.vendor, "gpu_access": self._gpu(),
                "mem_limit_bytes": self.mem_limit_bytes, "mem_limit_rule": self.mem_limit_rule,
                "shm_size_bytes": self.shm_size_bytes, "network": "none during passes",
                "confinement": self.confinement()}

    def confinement(self) -> dict:
        """The container's limits and privileges, as given to the engine (recorded in the manifest)."""
        return {"read_only_rootfs": True, "writable": [C_PASS, f"/tmp (tmpfs, {self.tmpfs_bytes} bytes)"],
                "cap_drop": ["ALL"], "security_opt": ["no-new-privileges"], "pids_limit": self.pids_limit,
                "mem_limit_bytes": self.mem_limit_bytes, "memswap_limit_bytes": self.mem_limit_bytes}

    def _gpu(self, cards: int = 1) -> dict:
        """GPU access; a multi-card pass on NVIDIA gets exactly GPUs 0..cards-1 (torchrun's local ranks)."""
        ids = [str(i) for i in range(cards)] if self.vendor == "nvidia" and cards > 1 else None
        return gpu_run_kwargs(self.vendor, device_ids=ids,
                              extra_group_ids=rocm_device_gids() if self.vendor == "rocm" else None)

    def _isolation(self) -> str:
        return f"container {self.image_ref} ({self.image.id})"

    def find_leftovers(self, campaign: str) -> list[dict]:
        """Containers of ``campaign`` still present (an interrupted run), by label.

        Reported for the journal, never reused. Each: id, name, status, pass, variant.
        """
        out = []
        for c in self.client.containers.list(all=True, filters={"label": f"{LABEL_PREFIX}.campaign={campaign}"}):
            lb = c.labels or {}
            out.append({"id": c.id, "name": c.name, "status": c.status,
                        "pass": lb.get(f"{LABEL_PREFIX}.pass", ""), "variant": lb.get(f"{LABEL_PREFIX}.variant", "")})
        return out

    def stop_leftovers(self, campaign: str) -> list[dict]:
        """Stop and remove the containers of ``campaign`` left by a killed orchestrator (by label),
        so a resumed campaign never shares the GPU with its previous pass. Returns one record
        per container: id, name, pass, variant, status before, exit code, OOMKilled, stopped."""
        out = []
        for c in self.client.containers.list(all=True, filters={"label": f"{LABEL_PREFIX}.campaign={campaign}"}):
            lb = c.labels or {}
            rec = {"id": c.id, "name": c.name, "status_before": c.status,
                   "pass": lb.get(f"{LABEL_PREFIX}.pass", ""), "variant": lb.get(f"{LABEL_PREFIX}.variant", "")}
            try:
                if c.status in ("running", "paused", "restarting"):
                    if c.status == "paused":
                        c.unpause()
                    c.stop(timeout=self.stop_timeout_s)
                    rec["stopped"] = True
                c.reload()
                state = c.attrs.get("State", {})
                rec.update(exit_code=state.get("ExitCode"), oom_killed=bool(state.get("OOMKilled")),
                           finished_at=state.get("FinishedAt", ""))
                c.remove(force=True)
                rec["removed"] = True
            except Exception as exc:  # recorded; the next pass still runs in its own container
                rec["error"] = f"{type(exc).__name__}: {exc}"[:200]
            out.append(rec)
        return out

    # ---- one pass --------------------------------------------------------------------
    def _user(self) -> tuple[int, int] | None:
        """uid:gid the pass runs as: the host's when not root, else the image's numeric USER."""
        if os.geteuid() != 0:
            return os.getuid(), os.getgid()
        user = (self.image.attrs.get("Config", {}).get("User") or "").split(":")
        if len(user) == 2 and all(u.isdigit() for u in user):
            return int(user[0]), int(user[1])
        return None

    def _mounts(self, spec: PassSpec, pass_dir: Path) -> tuple[dict, dict]:
        """(docker volumes, container-side spec fields)."""
        vols = {str(pass_dir): {"bind": C_PASS, "mode": "rw"}}
        corpus = Path(spec.corpus_path).resolve()
        c_corpus = f"{C_DATA}/{corpus.name}"
        vols[str(corpus)] = {"bind": c_corpus, "mode": "ro"}
        fields: dict[str, Any] = {"corpus_path": c_corpus, "model_ref": spec.model_ref}
        if Path(spec.model_ref).is_dir():
            vols[str(Path(spec.model_ref).resolve())] = {"bind": C_MODEL, "mode": "ro"}
            fields["model_ref"] = C_MODEL
        elif self.hf_home:
            vols[str(Path(self.hf_home).resolve())] = {"bind": "/models/hf-home", "mode": "ro"}
        entry = (spec.extra.get("task") or {}).get("entry")
        if entry:  # the user's code: its folder read-only, the entry named by its container path
            file, _, cls = entry.rpartition(":")
            host = Path(file).resolve()
            vols[str(host.parent)] = {"bind": C_TASK, "mode": "ro"}
            fields["extra"] = {**spec.extra, "task": {**spec.extra["task"], "entry": f"{C_TASK}/{host.name}:{cls}"}}
        out = Path(spec.out_dir).resolve()
        if out == pass_dir or pass_dir in out.parents:
            fields["out_dir"] = f"{C_PASS}/{out.relative_to(pass_dir)}".rstrip("/.")
        else:
            out.mkdir(parents=True, exist_ok=True)
            vols[str(out)] = {"bind": C_OUT, "mode": "rw"}
            fields["out_dir"] = C_OUT
        return vols, fields

    def launch(self, spec: PassSpec, pass_dir: Path, on_line: LineSink,
               should_stop: Callable[[], bool] = lambda: False) -> LaunchOutcome:
        """Run one pass in a new container; block until it ends. Never raises for a failed pass."""
        pass_dir = Path(pass_dir).resolve()
        vols, fields = self._mounts(spec, pass_dir)
        cspec = dataclasses.replace(spec, **fields)
        cspec.write(pass_dir / C_SPEC_NAME)
        user = self._user()
        rw = [Path(src) for src, m in vols.items() if m["mode"] == "rw"]
        owners = {d: (d.stat().st_uid, d.stat().st_gid) for d in rw}
        if user is not None:
            bad = [b for src, m in vols.items() if m["mode"] == "ro" for b in unreadable_for(Path(src), *user)]
            if bad:
                note = (f"the container user {user[0]}:{user[1]} cannot read {bad[0]}; make the corpus "
                        f"and model readable (e.g. chmod -R a+rX on them) and run again")
                return LaunchOutcome(None, isolation=self._isolation(), note=note, extra={"unreadable": bad})
            if os.geteuid() == 0:  # the writable folders belong to the pass user during the pass
                for d in rw:
                    _chown_tree(d, *user)
        else:
            for d in rw:
                os.chmod(d, 0o777)
        return self._run(spec, pass_dir, vols, user, owners, on_line, should_stop)

    def probe_compile_toolchain(self, kind: str) -> str:
        """'' when torch.compile can build ``kind`` ("cpu" or "gpu") kernels inside the pass
        image, else why not in one line (lab.passes.compile.COMPILER_PROBE, run in a
        throw-away container without network)."""
        from lab.passes.compile import COMPILER_PROBE, parse_compiler_probe

        cmd0 = (self.image.attrs.get("Config", {}).get("Cmd") or ["python"])[0]
        try:
            out = self.client.containers.run(self.image.id, command=[cmd0, "-c", COMPILER_PROBE, kind],
                                             remove=True, network_mode="none", environment={"HOME": "/tmp"},
                                             labels={**self.labels, f"{LABEL_PREFIX}.probe": "compile"},
                                             stdout=True, stderr=False)
        except Exception as exc:  # the engine or the image could not run the probe
            return f"the compiler probe did not run in {self.image_ref} ({type(exc).__name__})"
        return parse_compiler_probe(out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out))

    def _create(self, spec: PassSpec, vols: dict, user):
        lb = {f"{LABEL_PREFIX}.campaign": spec.campaign, f"{LABEL_PREFIX}.pass": spec.pass_id,
              f"{LABEL_PREFIX}.variant": spec.variant.variant_id,
              **self.labels}
        cmd0 = (self.image.attrs.get("Config", {}).get("Cmd") or ["python"])[0]
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "MALLOC_ARENA_MAX": "2"}
        if self.hf_home and not Path(spec.model_ref).is_dir():
            env["HF_HOME"] = "/models/hf-home"
        env["HOME"] = "/tmp"  # the root filesystem is read-only; caches go to the tmpfs
        gpu = self._gpu(spec.variant.cards)
        kw = dict(command=[cmd0, "-u", "-m", "lab.passes.runner", f"{C_PASS}/{C_SPEC_NAME}"],
                  name=re.sub(r"[^a-zA-Z0-9_.-]", "-", f"iteralab-{spec.pass_id}-{uuid.uuid4().hex[:6]}"),
                  labels=lb, volumes=vols, working_dir="/work", environment=env, detach=True,
                  network_mode="none", shm_size=self.shm_size_bytes, init=True,
                  read_only=True, tmpfs={"/tmp": f"rw,nosuid,nodev,size={self.tmpfs_bytes},mode=1777"},
                  cap_drop=["ALL"], pids_limit=self.pids_limit,
                  security_opt=["no-new-privileges"] + gpu.pop("security_opt", []), **gpu)
        if user is not None:
            kw["user"] = f"{user[0]}:{user[1]}"
        if self.mem_limit_bytes:
            kw.update(mem_limit=int(self.mem_limit_bytes), memswap_limit=int(self.mem_limit_bytes))
        return self.client.containers.create(self.image.id, **kw)

    def _run(self, spec, pass_dir, vols, user, owners, on_line, should_stop) -> LaunchOutcome:
        container = None
        stopped, timed_out, finished = threading.Event(), threading.Event(), threading.Event()
        log_lock = threading.Lock()
        log = open(pass_dir / "log.txt", "a", encoding="utf-8")

        def write_log(line: str) -> None:
            with log_lock:
                log.write(line + "\n")
                log.flush()

        started = time.monotonic()
        last_line, why = [started], [""]
        try:
            container = self._create(spec, vols, user)
            container.start()

            def pump_stderr() -> None:
                for line in iter_lines(container.logs(stream=True, follow=True, stdout=False, stderr=True)):
                    write_log(line)

            def watch() -> None:
                while not finished.wait(0.5):
                    why[0] = limit_reason(started, last_line[0], self.timeout_s, self.stall_s)
                    if why[0] or should_stop():
                        (timed_out if why[0] else stopped).set()
                        container.reload()
                        if container.status == "paused":  # a frozen pass: thaw it so it can be stopped
                            container.unpause()
                        container.stop(timeout=self.stop_timeout_s)
                        return

            threads = [threading.Thread(target=pump_stderr, daemon=True),
                       threading.Thread(target=watch, daemon=True)]
            for t in threads:
                t.start()
            for line in iter_lines(container.logs(stream=True, follow=True, stdout=True, stderr=False)):
                write_log(line)
                last_line[0] = time.monotonic()
                on_line(line)
            status = container.wait()
            finished.set()
            threads[0].join(timeout=10)
            container.reload()
            state = container.attrs.get("State", {})
            return self._outcome(container, state, status, stopped.is_set(), why[0] if timed_out.is_set() else "")
        except Exception as exc:  # engine error: a failure row, never an exception
            note = f"docker error: {type(exc).__name__}: {exc}"[:300]
            if NO_DRIVER_MARK in str(exc):
                note += "; " + toolkit_fix()
            return LaunchOutcome(None, container_id=container.id if container else "",
                                 isolation=self._isolation(), note=note)
        finally:
            finished.set()
            log.close()
            if container is not None:
                try:
                    container.remove(force=True)
                except Exception:  # already gone; find_leftovers reports any that stays
                    pass
            if user is not None and os.geteuid() == 0:  # ownership given back
                for d, owner in owners.items():
                    _chown_tree(d, *owner)

    def _outcome(self, container, state: dict, status: dict, stopped: bool, timed_out: str) -> LaunchOutcome:
        raw = state.get("ExitCode", status.get("StatusCode"))
        oom = bool(state.get("OOMKilled"))
        # 128+N is "killed by signal N" (init forwards it): the local launcher's -N.
        code = -(raw - 128) if isinstance(raw, int) and 128 < raw <= 128 + 64 else raw
        asked = stopped or timed_out  # our own stop: SIGTERM, then SIGKILL after stop_timeout_s
        killed = not asked and (oom or (code == -9 and bool(self.mem_limit_bytes)))
        note = ("stopped by the user" if stopped else timed_out if timed_out
                else "killed, host memory" if killed else "")
        extra = {"container_exit_code": raw, "oom_killed": oom, "mem_limit_bytes": self.mem_limit_bytes,
                 "container_name": container.name, "image_id": self.image.id,
                 "started_at": state.get("StartedAt", ""), "finished_at": state.get("FinishedAt", "")}
        if killed:
            extra["evidence"] = "State.OOMKilled" if oom else "SIGKILL under a memory limit"
        return LaunchOutcome(code, killed_host_memory=killed, container_id=container.id,
                             isolation=self._isolation(), note=note, extra=extra)
