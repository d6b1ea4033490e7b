"""Drives pincer's web console in a real headless Chromium (Debian's
chromium + chromium-driver, through the official selenium client), as a
person would: signs in with the one-time link, reads every page, chats
with a workspace and decides its tool call inline, revokes the "always"
rule that decision made, runs a scheduled task now, and watches the audit
log's live tail. Prints one line per check; exits non-zero on the first
failure, naming it.

Usage: console_browser.py LOGIN_URL WORKSPACE TASK HOSTILE
  HOSTILE: text that must show as text (a stored memory and the reply).
"""

import shutil
import sys
import tempfile

from selenium import webdriver
from selenium.common.exceptions import (NoAlertPresentException, StaleElementReferenceException,
                                        WebDriverException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

PAGES = ["/", "/chat", "/sessions", "/approvals", "/schedules", "/workspaces",
         "/usage", "/audit", "/channels"]


def fail(what):
    print(f"FAILED: {what}", flush=True)
    sys.exit(1)


def check(ok, what):
    if not ok:
        fail(what)
    print(f"ok: {what}", flush=True)


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--disable-gpu", "--no-first-run",
                f"--user-data-dir={tempfile.mkdtemp(prefix='pincer-chromium-')}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver: selenium never looks for one on the network.
    service = Service(shutil.which("chromedriver") or "/usr/bin/chromedriver")
    return webdriver.Chrome(service=service, options=options)


def no_alert(driver, where):
    try:
        text = driver.switch_to.alert.text
        fail(f"{where}: a script ran and opened an alert ({text!r})")
    except NoAlertPresentException:
        pass


def console_errors(driver):
    """Browser log lines that are errors (CSP violations among them)."""
    return [e["message"] for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and "favicon" not in e["message"]]


UNLABELLED = """
const bad = [];
for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea')) {
  if (el.labels.length === 0 && !el.getAttribute('aria-label')) bad.push(el.outerHTML);
}
for (const el of document.querySelectorAll('button')) {
  if (!el.textContent.trim() && !el.getAttribute('aria-label')) bad.push(el.outerHTML);
}
return bad;
"""


def wait_text(driver, text, seconds=90, within="main"):
    # A form's answer replaces the page under the wait: a stale element is
    # the old page, not a failure.
    WebDriverWait(driver, seconds, ignored_exceptions=[StaleElementReferenceException]).until(
        lambda d: text in d.find_element(By.TAG_NAME, within).text,
        message=f"{text!r} never showed")


def detached(element):
    """Selenium's staleness_of, also taking chromedriver's other answer for a node of
    a document the page has navigated away from: "Node with given id does not
    belong to the document", which it gives while the next page loads."""
    def gone(_driver):
        try:
            element.is_enabled()
            return False
        except StaleElementReferenceException:
            return True
        except WebDriverException as e:
            if "does not belong to the document" in str(e):
                return True
            raise
    return gone


def main():
    login, workspace, task, hostile = sys.argv[1:5]
    base = login.split("/login")[0]
    driver = browser()
    try:
        driver.get(login)
        check(driver.current_url == base + "/", "the sign-in link lands on the overview")
        check(driver.execute_script("return document.cookie") == "",
              "the session cookie is out of scripts' reach (HttpOnly)")

        for path in PAGES:
            driver.get(base + path)
            headings = driver.find_elements(By.TAG_NAME, "h1")
            check(len(headings) == 1, f"{path}: one h1 ({headings[0].text if headings else '-'})")
            check(driver.execute_script(UNLABELLED) == [], f"{path}: every control has a label")
            errors = console_errors(driver)
            check(errors == [], f"{path}: no console errors or CSP violations {errors}")

        driver.get(f"{base}/workspaces/{workspace}")
        check(hostile in driver.find_element(By.TAG_NAME, "main").text,
              "a stored memory's markup shows as text")
        check(driver.find_elements(By.CSS_SELECTOR, "main img") == [],
              "and makes no element")
        no_alert(driver, "workspace page")

        # Chat: the turn streams into the page; its call is decided inline.
        driver.get(f"{base}/chat?workspace={workspace}")
        driver.find_element(By.ID, "chat-text").send_keys("write the file")
        driver.find_element(By.CSS_SELECTOR, "form.chat button[type=submit]").click()
        WebDriverWait(driver, 90).until(
            lambda d: d.find_elements(By.XPATH, "//button[text()='Always allow']"),
            message="the approval never showed in the chat")
        check(True, "the tool call waits for a decision in the chat")
        allow = driver.find_element(By.XPATH, "//button[text()='Always allow']")
        allow.click()
        # The page the decision comes back to follows the rest of the turn
        # live (the model answers 2 s later): marked once it has loaded.
        WebDriverWait(driver, 30).until(detached(allow))
        WebDriverWait(driver, 30).until(
            lambda d: d.execute_script("return document.readyState") == "complete")
        check(driver.find_elements(By.CSS_SELECTOR, "[data-chat-feed]") != [],
              "the decision comes back to the chat while the turn runs")
        driver.execute_script("window.pincerSamePage = true")
        wait_text(driver, "Turn done.")
        check(driver.execute_script("return window.pincerSamePage === true"),
              "the rest of the turn arrived over the stream, not by reloading")
        main_text = driver.find_element(By.TAG_NAME, "main").text
        check(hostile in main_text, "the model's markup shows as text")
        check(driver.find_elements(By.CSS_SELECTOR, "main img") == [], "and makes no element")
        no_alert(driver, "chat")
        errors = console_errors(driver)
        check(errors == [], f"chat: no console errors or CSP violations {errors}")

        # The "always" rule that decision stored is revoked here.
        driver.get(base + "/approvals")
        revoke = driver.find_elements(By.XPATH, "//button[starts-with(@aria-label, 'Revoke ')]")
        check(len(revoke) == 1, "the decision's rule is listed")
        revoke[0].click()
        wait_text(driver, "revoked")
        check(True, "the rule is revoked")

        # The audit tail in one window shows what another window does.
        driver.get(base + "/audit")
        tail = driver.current_window_handle
        driver.execute_script("window.pincerSamePage = true")
        driver.switch_to.new_window("tab")
        driver.get(base + "/schedules")
        driver.find_element(By.XPATH, f"//button[@aria-label='Run {task} now']").click()
        wait_text(driver, "queued")
        check(True, f"task {task} is queued to run now")
        driver.switch_to.window(tail)
        wait_text(driver, "schedule.run_requested", 30, within="tbody")
        check(driver.execute_script("return window.pincerSamePage === true"),
              "the audit tail updated without a reload")

        # The run shows in the task's history with the model's answer.
        driver.get(f"{base}/schedules/{workspace}/{task}")
        WebDriverWait(driver, 90, ignored_exceptions=[StaleElementReferenceException]).until(
            lambda d: "Q4 numbers are in" in d.find_element(By.TAG_NAME, "main").text
            or d.refresh(),
            message="the run never showed in the task's history")
        check(True, "the run and its output are in the task's history")
    except BaseException:
        print(f"at {driver.current_url}:\n{driver.find_element(By.TAG_NAME, 'body').text}",
              file=sys.stderr, flush=True)
        print(f"browser log: {driver.get_log('browser')}", file=sys.stderr, flush=True)
        raise
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
