"""Screenshots of the staff console, taken from the real server by Debian's headless Chromium.

Run through scripts/screenshots, which installs what this needs. Everything it makes
(database, browser profile, server log) lives in one temporary folder under var/ and
is removed at the end; the PNGs go to docs/screenshots/ only when every page showed
what its screenshot is for, else to var/screenshots-failed/ for a look.
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
# The checkout's packages (devtools here, Django's apps in seed()) import when run as scripts/screenshots.py.
sys.path.insert(0, str(REPO))

from devtools.ports import free_port  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
EXPERIMENT = "checkout-button"
# The subject of the lookup screenshot: assigned, and linked through cookies to a second user.
LOOKUP_USER = "user-0001"
# Assigned the other variant than LOOKUP_USER (by the hash of the demo salt), so the lookup shows both.
LINKED_USER = "user-0004"
# Who enters EXPERIMENT's second cohort, set after its two weeks of everyone: the example of
# docs/how-to/staff-console.md, so the picture beside it shows the sentence it quotes.
TARGETING = [
    {"attribute": "country", "in": ["DE", "AT"]},
    {"anyOf": [{"attribute": "plan", "equals": "pro"}, {"attribute": "seats", "gte": 10}]},
]
COVERAGE = 0.2
# TARGETING and COVERAGE as the experiment page must state them; the window follows it.
RULE = "20 % of users with country in [DE, AT] and (plan is pro or seats ≥ 10), between "
# New users asked for after the gates are set, with attributes; about 50 pass the targeting and the coverage.
GATED_SUBJECTS = 600
# A second experiment of users that targets and that LOOKUP_USER has not entered: the lookup,
# which knows no attributes, can only say what its answer depends on.
TARGETED_EXPERIMENT = "onboarding-tour"
TARGETED_DOCUMENT = {
    "schemaVersion": 1,
    "kind": "experiment",
    "metadata": {"id": TARGETED_EXPERIMENT, "name": "Guided onboarding tour", "status": "active", "parentId": "growth"},
    "spec": {
        "subjectType": "user",
        "hypothesis": "A guided tour helps free users of the new app finish their setup",
        "targeting": [{"attribute": "plan", "equals": "free"}, {"attribute": "appVersion", "gte": "2.3"}],
        "variants": [{"id": "control", "control": True, "split": 0.5}, {"id": "tour", "split": 0.5}],
    },
}
# A layer of cookies for the layer page; on cookies, so the user lookup stays as it is.
LAYER = "homepage"
LAYER_DOCUMENT = {
    "schemaVersion": 1,
    "kind": "layer",
    "metadata": {"id": LAYER, "name": "Home page"},
    "spec": {"subjectType": "cookie"},
}


def layer_experiment(key: str, status: str, slots: list[list[int]]) -> dict:
    """An experiment of cookies in LAYER owning these slots."""
    return {
        "schemaVersion": 1,
        "kind": "experiment",
        "metadata": {"id": key, "status": status, "parentId": "growth"},
        "spec": {
            "subjectType": "cookie",
            "layer": {"id": LAYER, "slots": slots},
            "variants": [{"id": "control", "control": True, "split": 0.5}, {"id": "new", "split": 0.5}],
        },
    }


# Applied in turn: an experiment that owned slots and ended, then two active experiments that took them
# over, and a draft whose slots an active one owns.
LAYER_APPLIES = [
    [LAYER_DOCUMENT, layer_experiment("old-hero", "active", [[0, 5000]])],
    [
        layer_experiment("old-hero", "ended", [[0, 5000]]),
        layer_experiment("hero-image", "active", [[0, 4000]]),
        layer_experiment("cta-wording", "active", [[4000, 6500]]),
        layer_experiment("carousel", "draft", [[6000, 9000]]),
    ],
]
WIDTH = 1400
HEIGHT = 1000
# Beyond this a full-page capture is cut: a runaway page should not make a huge PNG.
MAX_HEIGHT = 6000


class PageProblem(Exception):
    """A page did not show what its screenshot is meant to show."""


@dataclass(frozen=True)
class Seeded:
    experiment_pk: int
    subject_type_pk: int
    layer_pk: int
    # (name, type) of each attribute the subject type declares, as its page must list them.
    attributes: list[tuple[str, str]]
    # Assignments per day (oldest first), before the gates.
    per_day: list[tuple[str, int]]
    # How many of GATED_SUBJECTS the gates let in.
    entered: int


def configure_environment(workdir: Path) -> None:
    """Settings for both this process's Django and the server's: they must share one database."""
    os.environ.update(
        {
            "DATABASE_URL": f"sqlite:///{workdir / 'db.sqlite3'}",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            # A throwaway key: a fresh clone has no var/secret_key, and a non-default database needs one.
            "SECRET_KEY": secrets.token_urlsafe(50),
            "DEBUG": "false",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            # The server speaks plain HTTP on loopback; secure-only cookies would not come back on every browser.
            "SESSION_COOKIE_SECURE": "false",
            "CSRF_COOKIE_SECURE": "false",
            # Belt and braces: Selenium Manager is skipped anyway because both paths are given explicitly.
            "SE_OFFLINE": "true",
            "SE_AVOID_STATS": "true",
        }
    )


def seed(password: str) -> Seeded:
    """The demo configuration, a staff user, two weeks of assignments, then the gates and the users
    they let in, and a few identifier links."""
    import django

    django.setup()

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections
    from django.utils import timezone

    from assignments.assigning import assign_subjects
    from assignments.configuration.apply import Actor, resources_apply
    from assignments.configuration.export import resource_document
    from assignments.configuration.resources import Source, resource_read
    from assignments.models import Assignment, Experiment, Layer
    from assignments.selectors import subject_types_active_steps
    from idlinks.services import Identifier, id_link_create

    call_command("migrate", interactive=False, verbosity=0)
    call_command("apply_resources", str(REPO / "examples" / "demo.yaml"))
    get_user_model().objects.create_superuser("admin", "admin@example.com", password)

    experiment = Experiment.objects.get(key=EXPERIMENT)
    # Fixed seed: the same curve on every run, so a changed screenshot means a changed page.
    rng = random.Random(20240601)  # noqa: S311 - picture data, not a secret
    now = timezone.now()
    # The chart's days are UTC days: each batch is placed from its day's midnight, whatever the hour of the run.
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    per_day = []
    next_user = 1
    for days_ago in range(13, -1, -1):
        # A ramp-up with noise, and today only partly over.
        count = 40 + 9 * (13 - days_ago) + rng.randint(-12, 12)
        if days_ago == 0:
            count //= 3
        subject_ids = [f"user-{n:04d}" for n in range(next_user, next_user + count)]
        next_user += count
        assign_subjects(experiment_id=EXPERIMENT, subject_ids=subject_ids)
        # assign_subjects stamps "now"; the update moves the batch to its day (today's not into
        # the future), and the triggers on the assignments table move its daily counts with it.
        created_at = min(midnight - timedelta(days=days_ago) + timedelta(minutes=rng.randint(0, 600)), now)
        Assignment.objects.filter(experiment=experiment, subject_id__in=subject_ids).update(created_at=created_at)
        per_day.append((created_at.date().isoformat(), count))

    # The gates come after two weeks of everyone, so the experiment has a cohort of each to state in words.
    checkout = resource_document(experiment, with_version=False)
    checkout["spec"].update(
        enrollment={"startAt": midnight, "stopAt": midnight + timedelta(weeks=4)},
        targeting=TARGETING,
        coverage=COVERAGE,
    )
    for documents in ([checkout, TARGETED_DOCUMENT], *LAYER_APPLIES):
        specs = [
            resource_read(document, source=Source(__file__, number))
            for number, document in enumerate(documents, start=1)
        ]
        for result in resources_apply(specs=specs, actor=Actor.command()):
            print(result, flush=True)
    gated = [f"user-{n:04d}" for n in range(next_user, next_user + GATED_SUBJECTS)]
    attributes = {
        subject_id: {
            "country": rng.choice(["DE", "AT", "FR", "US"]),
            "plan": rng.choice(["free", "pro"]),
            "seats": rng.randint(1, 25),
        }
        for subject_id in gated
    }
    excluded = assign_subjects(experiment_id=EXPERIMENT, subject_ids=gated, attributes=attributes).excluded

    # user-0001 - cookie-7f3a - user-0004 (depth 2), and a second cookie on user-0001.
    links = [
        (("user", LOOKUP_USER), ("cookie", "cookie-7f3a")),
        (("cookie", "cookie-7f3a"), ("user", LINKED_USER)),
        (("user", LOOKUP_USER), ("cookie", "cookie-b91c")),
    ]
    for first, second in links:
        id_link_create(
            first=Identifier(*first), second=Identifier(*second), subject_types_active=subject_types_active_steps
        )
    subject_type = experiment.subject_type
    connections.close_all()
    return Seeded(
        experiment_pk=experiment.pk,
        subject_type_pk=subject_type.pk,
        layer_pk=Layer.objects.get(key=LAYER).pk,
        attributes=[(attribute["name"], attribute["type"]) for attribute in subject_type.attributes],
        per_day=per_day,
        entered=len(gated) - len(excluded),
    )


def start_server(workdir: Path, port: int) -> subprocess.Popen:
    env = dict(os.environ, GUNICORN_BIND=f"127.0.0.1:{port}", GUNICORN_WORKERS="1", DATABASE_POOL_SIZE="4")
    log = (workdir / "server.log").open("wb")
    server = subprocess.Popen(  # noqa: S603 - a fixed command line, nothing from outside
        [str(REPO / ".venv" / "bin" / "gunicorn"), "-c", "deploy/gunicorn.conf.py"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        # Its own process group: a Ctrl-C meant for this script reaches the server only through stop_server.
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode}; see its log below")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    server.terminate()
    raise RuntimeError("the server did not answer /healthz within 30 seconds")


def stop_server(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def start_browser(workdir: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-extensions",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        "--lang=en-US",
        f"--user-data-dir={workdir / 'chromium-profile'}",
        f"--window-size={WIDTH},{HEIGHT}",
    ]:
        options.add_argument(argument)
    service = Service(CHROMEDRIVER, log_output=str(workdir / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    return driver


def response_status(driver) -> int:
    """The HTTP status of the page now shown (0 if the browser does not say)."""
    status = driver.execute_script(
        "const entry = performance.getEntriesByType('navigation')[0]; return entry ? entry.responseStatus : 0;"
    )
    return int(status or 0)


def open_page(driver, url: str) -> None:
    """Load url and insist on a 200 at that very path: an unknown admin URL redirects to the index with a 200."""
    driver.get(url)
    status = response_status(driver)
    if status != 200:
        raise PageProblem(f"{url} answered {status}")
    if urlsplit(driver.current_url).path != urlsplit(url).path:
        raise PageProblem(f"{url} ended at {driver.current_url}")


def log_in(driver, base: str, password: str) -> None:
    from selenium.webdriver.common.by import By

    open_page(driver, f"{base}/admin/login/?next=/admin/")
    driver.find_element(By.NAME, "username").send_keys("admin")
    driver.find_element(By.NAME, "password").send_keys(password)
    old_page = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.CSS_SELECTOR, "#login-form [type=submit]").click()
    # The click can return before the next page is in: checking at once sometimes found no user tools yet.
    _wait_for_new_page(driver, old_page)
    if not driver.find_elements(By.ID, "user-tools"):
        raise PageProblem(f"logging in failed: still at {driver.current_url}")


def _document_box(driver, selector: str) -> dict:
    """Where the first element matching selector is, in page coordinates."""
    return driver.execute_script(
        "const box = document.querySelector(arguments[0]).getBoundingClientRect();"
        "return {top: box.top + window.scrollY, bottom: box.bottom + window.scrollY};",
        selector,
    )


def save_page(driver, path: Path, *, from_selector: str | None = None, to_selector: str | None = None) -> None:
    """The whole page, not just the window: the health panel sits below the first screen.

    The viewport itself is made as tall as the page, rather than capturing beyond it,
    so that boxes sized to the viewport (the admin's sticky nav sidebar, 100vh) reach
    the bottom of the picture as they would on a tall screen. With from_selector, one
    from that element down to the end of to_selector's (else one window's height): the
    part of a long page a reader must see.
    """
    height = HEIGHT
    # Twice: a taller viewport can change the layout, and with it the page's height.
    for _ in range(2):
        metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
        content = metrics.get("cssContentSize") or metrics["contentSize"]
        height = max(HEIGHT, min(int(content["height"]), MAX_HEIGHT))
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
    try:
        top = 0
        if from_selector is not None:
            first = _document_box(driver, from_selector)
            last = _document_box(driver, to_selector) if to_selector is not None else None
            # A little of what comes before, so the reader sees where on the page this is.
            top = max(0, int(first["top"]) - 45)
            bottom = int(last["bottom"]) + 20 if last is not None else top + HEIGHT
            height = max(1, min(bottom, height) - top)
        clip = {"x": 0, "y": top, "width": WIDTH, "height": height, "scale": 1}
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "clip": clip})
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    path.write_bytes(base64.b64decode(shot["data"]))


def page_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def shown_text(scope, selector: str) -> str:
    """The text of the first element in scope (the page or an element) matching selector, "" if there is
    none: a missing part is then a PageProblem naming it, not an exception that stops the run."""
    from selenium.webdriver.common.by import By

    elements = scope.find_elements(By.CSS_SELECTOR, selector)
    return elements[0].text if elements else ""


def field_value(scope, selector: str) -> str:
    """The value of the first input, select or textarea in scope matching selector, "" if there is none."""
    from selenium.webdriver.common.by import By

    elements = scope.find_elements(By.CSS_SELECTOR, selector)
    return (elements[0].get_attribute("value") or "") if elements else ""


def experiment_page(driver, base: str, experiment_pk: int, path: Path) -> None:
    from selenium.webdriver.common.by import By

    open_page(driver, f"{base}/admin/assignments/experiment/{experiment_pk}/change/")
    save_page(driver, path)
    cohorts = shown_text(driver, "#cohorts-group")
    shown = {
        "an SVG chart (no health panel?)": bool(driver.find_elements(By.CSS_SELECTOR, "#content svg")),
        f"'{RULE}...' as who may enter now": RULE in shown_text(driver, "#population"),
        "the enrollment window's fields": all(
            field_value(driver, f"[name={name}]") for name in ("enrollment_start_at", "enrollment_stop_at")
        ),
        "the targeting's field": "anyOf" in field_value(driver, "[name=targeting]"),
        f"coverage {COVERAGE}": field_value(driver, "[name=coverage]") == str(COVERAGE),
        "cohort 1 as every user": "every user" in cohorts,
        "cohort 2 with its rule": RULE in cohorts,
    }
    missing = [part for part, ok in shown.items() if not ok]
    if missing:
        raise PageProblem(f"the experiment page does not show {', '.join(missing)}")


def split_input(driver):
    """The first variant's split input: `variants-0-split` by Django's inline-formset naming, whatever the prefix."""
    from selenium.webdriver.common.by import By

    inputs = driver.find_elements(By.NAME, "variants-0-split") or driver.find_elements(
        By.CSS_SELECTOR, "input[name$='-0-split']"
    )
    if not inputs:
        raise PageProblem("the experiment change form has no editable split input (read-only page?)")
    return inputs[0]


def rejected_split(driver, base: str, experiment_pk: int, path: Path) -> None:
    from selenium.webdriver.common.by import By

    open_page(driver, f"{base}/admin/assignments/experiment/{experiment_pk}/change/")
    field = split_input(driver)
    field.clear()
    field.send_keys("0.7")
    save = driver.find_elements(By.CSS_SELECTOR, "input[name=_save], button[name=_save]")
    if not save:
        raise PageProblem("the experiment change form has no Save button")
    old_page = driver.find_element(By.TAG_NAME, "html")
    save[0].click()
    _wait_for_new_page(driver, old_page)
    errors = driver.find_elements(By.CSS_SELECTOR, ".errornote, .errorlist")
    if not errors:
        save_page(driver, path)
        raise PageProblem(f"saving splits that sum to 1.2 showed no error (now at {driver.current_url})")
    # From the form's error note down to the variants, where the reason is; with who may enter now
    # above the note, whole (its sentence can take two lines), so the cut falls between elements.
    variants = split_input(driver).find_element(By.XPATH, "ancestor::*[contains(@class, 'inline-group')]")
    variants_id = variants.get_attribute("id")
    save_page(
        driver,
        path,
        from_selector="#population, .errornote, .errorlist",
        to_selector=f"#{variants_id}" if variants_id else None,
    )


def _wait_for_new_page(driver, old_page) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    def replaced(_driver) -> bool:
        try:
            old_page.tag_name  # noqa: B018
        except StaleElementReferenceException:
            return True
        return False

    WebDriverWait(driver, 20).until(replaced)
    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.readyState") == "complete")


def subject_lookup(driver, base: str, path: Path) -> None:
    open_page(driver, f"{base}/admin/assignments/assignment/lookup/?subject_type=user&subject_id={LOOKUP_USER}&depth=2")
    save_page(driver, path)
    text = page_text(driver)
    missing = [wanted for wanted in (LOOKUP_USER, "cookie-7f3a", LINKED_USER, EXPERIMENT) if wanted not in text]
    running = shown_text(driver, "#running-experiments")
    targeted = ", ".join(condition["attribute"] for condition in TARGETED_DOCUMENT["spec"]["targeting"])
    missing += [
        wanted
        for wanted in (
            f"{EXPERIMENT} active control",
            f"{TARGETED_EXPERIMENT} active depends on attributes: {targeted}",
        )
        if wanted not in running
    ]
    if missing:
        raise PageProblem(f"the subject lookup does not show {', '.join(missing)}")


def subject_type_page(driver, base: str, subject_type_pk: int, attributes: list[tuple[str, str]], path: Path) -> None:
    from selenium.webdriver.common.by import By

    open_page(driver, f"{base}/admin/assignments/subjecttype/{subject_type_pk}/change/")
    save_page(driver, path)
    rows = [
        (field_value(row, "[name$='-name']"), field_value(row, "[name$='-type']"))
        for row in driver.find_elements(By.CSS_SELECTOR, "#declared-attributes tbody tr")
    ]
    # The declared ones first, in order, then blank rows to add more.
    if not attributes or rows[: len(attributes)] != attributes:
        raise PageProblem(f"the subject type's page lists the attributes {rows}, not {attributes}")


def layer_page(driver, base: str, layer_pk: int, path: Path) -> None:
    from selenium.webdriver.common.by import By

    open_page(driver, f"{base}/admin/assignments/layer/{layer_pk}/change/")
    save_page(driver, path)
    runs = [row.text for row in driver.find_elements(By.CSS_SELECTOR, "#slot-runs tbody tr")]
    shown = {
        "the slot bar": bool(driver.find_elements(By.CSS_SELECTOR, "#slots svg")),
        "6,500 of 10,000 slots owned": "6,500 of 10,000 owned by 2 active experiments"
        in shown_text(driver, "#slots h2"),
        "the runs of slots with their owners now and before": runs
        == [
            "0 to 3999 40 % hero-image (active) old-hero (ended)",
            "4000 to 4999 10 % cta-wording (active) old-hero (ended)",
            "5000 to 6499 15 % cta-wording (active) none",
            "6500 to 9999 35 % free none",
        ],
        "the draft that cannot start": "refused while active experiment cta-wording owns slots 6000 to 6499"
        in shown_text(driver, "#slot-drafts"),
    }
    missing = [part for part, ok in shown.items() if not ok]
    if missing:
        raise PageProblem(f"the layer page does not show {', '.join(missing)} (runs: {runs})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "screenshots", help="where the PNGs go")
    args = parser.parse_args()
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not os.access(binary, os.X_OK):
            print(f"{binary} is missing: run scripts/screenshots, which installs it", file=sys.stderr)
            return 1

    (REPO / "var").mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="screenshots-", dir=REPO / "var"))
    shots = workdir / "png"
    shots.mkdir()
    server = driver = None
    problems: list[str] = []
    try:
        configure_environment(workdir)
        password = secrets.token_urlsafe(16)
        print("== seeding a throwaway database", flush=True)
        seeded = seed(password)
        print("   assignments per day: " + ", ".join(f"{day[5:]}={count}" for day, count in seeded.per_day), flush=True)
        print(f"   then the gates let in {seeded.entered} of {GATED_SUBJECTS} new users", flush=True)
        port = free_port()
        print(f"== starting the server on 127.0.0.1:{port}", flush=True)
        server = start_server(workdir, port)
        base = f"http://127.0.0.1:{port}"
        print("== taking screenshots with headless Chromium", flush=True)
        driver = start_browser(workdir)
        log_in(driver, base, password)
        pages = [
            ("experiment-page.png", lambda path: experiment_page(driver, base, seeded.experiment_pk, path)),
            ("rejected-split.png", lambda path: rejected_split(driver, base, seeded.experiment_pk, path)),
            ("subject-lookup.png", lambda path: subject_lookup(driver, base, path)),
            (
                "subject-type.png",
                lambda path: subject_type_page(driver, base, seeded.subject_type_pk, seeded.attributes, path),
            ),
            ("layer-page.png", lambda path: layer_page(driver, base, seeded.layer_pk, path)),
        ]
        # Every page is tried even after one fails: one run reports all that is wrong.
        for name, take in pages:
            try:
                take(shots / name)
                print(f"   {name}: ok", flush=True)
            except PageProblem as problem:
                problems.append(f"{name}: {problem}")
                print(f"   {name}: FAILED: {problem}", flush=True)
    except Exception as error:
        problems.append(f"{type(error).__name__}: {error}")
        print(f"FAILED: {type(error).__name__}: {error}", file=sys.stderr)
    finally:
        if driver is not None:
            driver.quit()
        if server is not None:
            stop_server(server)
        if problems and (workdir / "server.log").exists():
            print("== server log (last 40 lines, static files left out)", file=sys.stderr)
            lines = (workdir / "server.log").read_text(errors="replace").splitlines()
            lines = [line for line in lines if '"GET /static/' not in line]
            print("\n".join(lines[-40:]), file=sys.stderr)
        failed = REPO / "var" / "screenshots-failed"
        destination = failed if problems else args.output
        taken = sorted(shots.glob("*.png"))
        # Only this run's pictures: a stale one from an earlier failure would mislead.
        shutil.rmtree(failed, ignore_errors=True)
        if taken:
            destination.mkdir(parents=True, exist_ok=True)
            for png in taken:
                shutil.copy2(png, destination / png.name)
            print(f"== {len(taken)} screenshot(s) in {destination}", flush=True)
        shutil.rmtree(workdir, ignore_errors=True)
    if problems:
        print("screenshots FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
