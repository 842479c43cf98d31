"""lineage ui in a real browser (issue 36, U1): headless Chromium driven by Selenium through
chromedriver. Called by tests/u1_ui_browser.rs with the page's URL, the root whose tree to watch,
the ids it must see, and where to save screenshots. Exits 0 when every check held; otherwise
prints what it saw and exits 1.

Checks, in order:
- the tree page shows the root and its first child on node-2 (placed as `node-2@<epoch>`);
- the page updates by itself: the second child, born seconds after the page loaded, appears
  without a reload (and its start in the live feed, streamed from the lifecycle subjects), and
  the first child's state changes once it settles;
- the sessions view lists the root; a session's view shows its transcript; the cluster view
  shows the nodes;
- an unknown session in the URL and a malformed id each show a readable message, and the page
  keeps working;
- from the second child's view, an interrupt (asked first) cancels its turn and a followup is
  delivered, both in its transcript; its live output (the node's turn-start and turn-end as they
  are published) shows the cancelled turn, then the followup's turn under way before its end,
  then its end; an empty followup is refused with a readable message, which the page's
  refreshes leave in place;
- the drain button asks first (dismissed: nothing changes); confirmed, the tree is drained,
  children first (the root in the report's last wave), its waves drawn as bars from the drain's
  progress messages while it runs, and the tree shows it disposed.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException


def steady(read, tries=40):
    """Runs `read` until it does not meet an element the page replaced while it was read.

    The page redraws parts of itself (the tree every second, a session's live output on every
    event), so an element found and then read can be stale; such a read is simply made again.
    Bounded: after `tries` attempts (about ten seconds) the last error is raised.
    """
    for attempt in range(tries):
        try:
            return read()
        except (StaleElementReferenceException, NoSuchElementException):
            if attempt == tries - 1:
                raise
            time.sleep(0.25)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--first", required=True, help="the first child's id")
    ap.add_argument("--second-label", required=True, help="the label of the child born later")
    ap.add_argument("--second-spawn", required=True,
                    help="the command line (JSON list) that spawns it, run once the page shows the tree")
    ap.add_argument("--screenshots", required=True)
    ap.add_argument("--observer", action="store_true",
                    help="an observer's read-only page: it reads the tree and a transcript, and offers no action")
    args = ap.parse_args()
    os.makedirs(args.screenshots, exist_ok=True)

    options = Options()
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,720"]:
        options.add_argument(flag)
    service = Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(service=service, options=options)
    failures = []

    def text():
        return steady(lambda: driver.find_element(By.TAG_NAME, "body").text)

    def by_id(name):
        """The text of the element with this id, read again if the page replaced it."""
        return steady(lambda: driver.find_element(By.ID, name).text)

    def wait_for(what, predicate, within=30):
        deadline = time.time() + within
        while time.time() < deadline:
            try:
                if predicate():
                    return True
            except Exception:  # the page is being redrawn
                pass
            time.sleep(0.25)
        failures.append("%s (within %ss); the page said:\n%s" % (what, within, text()))
        return False

    def shot(name):
        driver.save_screenshot(os.path.join(args.screenshots, name + ".png"))

    if args.observer:
        try:
            observe(driver, args, text, wait_for, shot, failures)
        finally:
            driver.quit()
        if failures:
            print("\n".join(failures))
            sys.exit(1)
        print("ok")
        return
    try:
        driver.get("%s/#/tree/%s" % (args.url, args.root))
        wait_for("the tree shows the root and its first child on node-2",
                 lambda: args.root in text() and args.first in text() and "node-2@" in text())
        if args.second_label in text():
            failures.append("the second child is on the page before it was spawned")
        spawned = subprocess.run(json.loads(args.second_spawn), capture_output=True, text=True)
        if spawned.returncode != 0:
            failures.append("spawning the second child failed: %s" % spawned.stderr)
        wait_for("the second child appears without a reload",
                 lambda: args.second_label in text(), within=30)
        # Read from the rows in a wait: the page redraws every second, and a row read while it
        # is replaced is stale (then read again).
        found = {}
        def second_row():
            found["id"] = next((r.text.split()[0] for r in driver.find_elements(By.TAG_NAME, "tr")
                                if args.second_label in r.text.split()), "")
            return found["id"]
        wait_for("the second child's row", second_row)
        second = found.get("id", "")
        feed = lambda: driver.find_element(By.ID, "feed").text
        wait_for("the live feed shows the second child's start, from the lifecycle subjects",
                 lambda: second and any("subagent/start" in l and second in l for l in feed().splitlines()))
        first_row = lambda: next(r.text for r in driver.find_elements(By.TAG_NAME, "tr")
                                 if args.first in r.text)
        wait_for("the first child's state changes once it settles",
                 lambda: "waiting" in first_row() or "settled" in first_row(), within=45)
        shot("tree")

        driver.get("%s/#/" % args.url)
        wait_for("the sessions view lists the root", lambda: args.root in text())
        shot("sessions")

        driver.get("%s/#/session/%s" % (args.url, args.first))
        wait_for("a session's view shows its transcript",
                 lambda: "Transcript" in text() and "turn/end" in text())
        shot("session")

        # The second child sleeps in its turn: interrupt it (asked first), then send it a
        # followup, from its session's view; its transcript shows both.
        driver.get("%s/#/session/%s" % (args.url, second))
        wait_for("the second child's view", lambda: "Transcript" in text())
        wait_for("its live output stream is open",
                 lambda: driver.execute_script("return output.source !== null && output.source.readyState === 1"))
        live = lambda: by_id("output")
        steady(lambda: driver.find_element(By.ID, "interrupt").click())
        driver.switch_to.alert.accept()
        wait_for("the interrupt cancelled its turn",
                 lambda: "cancelled" in driver.find_element(By.ID, "action-result").text)
        wait_for("its live output shows the cancelled turn", lambda: "cancelled" in live())
        steady(lambda: driver.find_element(By.ID, "followup").send_keys("a followup from the page"))
        steady(lambda: driver.find_element(By.ID, "send").click())
        wait_for("the followup was delivered",
                 lambda: "delivered" in driver.find_element(By.ID, "action-result").text)
        # The followup's turn sleeps four seconds: the page shows it started before its end
        # was published, then its end.
        after_cancel = lambda: live().split("cancelled", 1)[-1]
        if wait_for("its live output shows the followup's turn under way",
                    lambda: "started" in after_cancel()):
            if "completed" in after_cancel():
                failures.append("the turn's start was shown only after its end:\n%s" % live())
            shot("output-live")
        wait_for("its live output shows the turn's end", lambda: "completed" in after_cancel())
        wait_for("its transcript shows the followup",
                 lambda: "a followup from the page" in text() and "interrupted" in text())
        steady(lambda: driver.find_element(By.ID, "send").click())
        if wait_for("an empty followup is refused with a readable message",
                    lambda: "empty" in driver.find_element(By.ID, "error").text):
            # The view refreshes every second; the refusal stays until the next action.
            time.sleep(2.5)
            if "empty" not in by_id("error"):
                failures.append("the refusal was cleared by a refresh, before the reader could read it")
        shot("actions")

        driver.get("%s/#/cluster" % args.url)
        wait_for("the cluster view shows the nodes", lambda: "node-1" in text() and "node-2" in text())
        shot("cluster")

        driver.get("%s/#/tree/01936c1e-7a3b-7cde-8f00-00000000beef" % args.url)
        wait_for("an unknown root is a readable message",
                 lambda: "not in the registry" in driver.find_element(By.ID, "error").text)
        driver.get("%s/#/session/not-an-id" % args.url)
        wait_for("a malformed id is a readable message",
                 lambda: "not a session id" in driver.find_element(By.ID, "error").text.lower()
                 or "session" in driver.find_element(By.ID, "error").text)
        shot("error")
        driver.get("%s/#/tree/%s" % (args.url, args.root))
        wait_for("the page keeps working after an error",
                 lambda: args.first in text() and not driver.find_element(By.ID, "error").is_displayed())

        # A drain asks first: dismissed, nothing changes.
        steady(lambda: driver.find_element(By.ID, "drain").click())
        driver.switch_to.alert.dismiss()
        time.sleep(1.5)
        if by_id("drain-result"):
            failures.append("a dismissed drain did something: %s" % by_id("drain-result"))
        if "disposed" in text():
            failures.append("a dismissed drain disposed something:\n%s" % text())
        # Confirmed: the tree is disposed, children first (the root in the last wave).
        steady(lambda: driver.find_element(By.ID, "drain").click())
        driver.switch_to.alert.accept()
        if wait_for("the drain's report", lambda: "drained:" in driver.find_element(By.ID, "drain-result").text):
            waves = json.loads(steady(
                lambda: driver.find_element(By.ID, "drain-result").get_attribute("data-report")))
            if args.root not in waves[-1] or args.first not in sum(waves[:-1], []):
                failures.append("not children first: %s" % waves)
            # The bars came from the progress messages, one per wave at least, each wave done.
            bars, updates = steady(lambda: (
                by_id("drain-progress"),
                int(driver.find_element(By.ID, "drain-progress").get_attribute("data-updates") or 0)))
            lines = bars.splitlines()
            if (len(lines) != len(waves) or not lines[0].startswith("wave 0 (leaves)")
                    or not all(l.endswith("done") for l in lines) or updates < len(waves)):
                failures.append("the drain's progress bars (%d updates): %s" % (updates, bars))
        wait_for("every session of the tree shows disposed",
                 lambda: text().count("disposed") >= 3 and "running" not in text())
        shot("drained")
    finally:
        driver.quit()
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("ok")


def observe(driver, args, text, wait_for, shot, failures):
    """An observer's page: the tree and a transcript, no drain, followup or interrupt."""
    driver.get("%s/#/tree/%s" % (args.url, args.root))
    wait_for("the observer sees the tree", lambda: args.first in text() and "node-2@" in text())
    wait_for("the observer's page offers no drain",
             lambda: "read only" in text() and not driver.find_elements(By.ID, "drain"))
    shot("observer-tree")
    driver.get("%s/#/session/%s" % (args.url, args.first))
    wait_for("the observer reads a transcript", lambda: "Transcript" in text() and "turn/start" in text())
    if driver.find_elements(By.ID, "followup") or driver.find_elements(By.ID, "interrupt"):
        failures.append("the observer's page offers a followup or an interrupt")


if __name__ == "__main__":
    main()
