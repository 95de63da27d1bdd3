"""Drives an aggregator's status page in headless Chromium (Selenium, chromedriver) for
tests/status_page.rs.

It loads the page, types the token when given one (after checking the page asks for it),
waits until every datacenter named shows, looks up a counter and prints `VALUE <shown>`; then
reads lines `EXPECT <value>` from stdin (the test writes to the cluster in between) and waits
until the page shows each, printing `SEEN <value>`. Finally it fails if the browser's console
logged any error (besides the 401 the page met before the token was typed) and prints `OK`.
Every failure exits 1 with one line saying what was missing, and the page's text.
"""

import argparse
import shutil
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

WAIT_SECONDS = 20


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--datacenters", required=True, help="names, comma-separated")
    parser.add_argument("--counter", required=True)
    parser.add_argument("--token")
    parser.add_argument("--chromium", default="chromium")
    parser.add_argument("--chromedriver", default="chromedriver")
    parser.add_argument("--insecure-tls", action="store_true",
                        help="accept the test CA's certificates")
    return parser.parse_args()


def browser(args):
    options = webdriver.ChromeOptions()
    # Full paths: given them, Selenium looks for no driver of its own.
    options.binary_location = shutil.which(args.chromium) or args.chromium
    for flag in ["--headless", "--no-sandbox", "--disable-background-networking",
                 "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1600"]:
        options.add_argument(flag)
    if args.insecure_tls:
        options.add_argument("--ignore-certificate-errors")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = shutil.which(args.chromedriver) or args.chromedriver
    service = webdriver.ChromeService(executable_path=driver)
    return webdriver.Chrome(options=options, service=service)


def fail(driver, why):
    try:
        text = driver.find_element(By.TAG_NAME, "body").text
    except WebDriverException:
        text = "(no page)"
    print(f"FAIL {why}\n--- the page ---\n{text}", flush=True)
    driver.quit()
    sys.exit(1)


def wait_for(driver, what, check):
    """Polls `check` until it returns a true value, for up to WAIT_SECONDS; fails naming `what`."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        try:
            found = check()
        except WebDriverException:
            found = None
        if found:
            return found
        time.sleep(0.2)
    fail(driver, f"no {what} within {WAIT_SECONDS} s")


def main():
    args = parse()
    driver = browser(args)
    driver.get(args.url)
    if driver.execute_script("return document.body.dataset.tier") not in ("global", "datacenter"):
        fail(driver, "the page does not say its tier")

    if args.token:
        # Without a token the page says one is needed, then works once it is typed.
        wait_for(driver, "request for a token",
                 lambda: "needs a token" in driver.find_element(By.ID, "problem").text)
        field = driver.find_element(By.ID, "token")
        field.send_keys(args.token)
        field.send_keys(Keys.ENTER)
        field.send_keys(Keys.TAB)

    for name in args.datacenters.split(","):
        selector = f'#datacenters .dc[data-name="{name}"] table.slots tbody tr'
        wait_for(driver, f"datacenter {name} with its slots",
                 lambda: driver.find_elements(By.CSS_SELECTOR, selector))
    problem = driver.find_element(By.ID, "problem")
    if problem.is_displayed():
        fail(driver, "the page shows a problem: " + problem.text)

    lookup = driver.find_element(By.ID, "lookup-id")
    lookup.send_keys(args.counter)
    lookup.send_keys(Keys.ENTER)
    value = wait_for(driver, "counter value",
                     lambda: driver.find_element(By.ID, "counter-value").text)
    wait_for(driver, "bounded counter's rights",
             lambda: "Rights" in driver.find_element(By.ID, "rights").text)
    print(f"VALUE {value}", flush=True)

    for line in sys.stdin:
        word, _, expected = line.strip().partition(" ")
        if word != "EXPECT":
            continue
        wait_for(driver, f"counter value {expected} (the live refresh)",
                 lambda: driver.find_element(By.ID, "counter-value").text == expected)
        print(f"SEEN {expected}", flush=True)

    # Nothing shows a JavaScript placeholder for a missing value.
    text = driver.find_element(By.TAG_NAME, "body").text
    for word in ["undefined", "NaN", "[object"]:
        if word in text:
            fail(driver, f"the page shows {word!r}")
    if "null" in text.split("\n"):
        fail(driver, "the page shows a line 'null'")

    errors = [entry["message"] for entry in driver.get_log("browser")
              if entry["level"] == "SEVERE"
              and not (args.token and "status of 401" in entry["message"])]
    if errors:
        fail(driver, "console errors: " + " | ".join(errors))
    driver.quit()
    print("OK", flush=True)


if __name__ == "__main__":
    main()
