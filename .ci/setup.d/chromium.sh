# The dashboard's browser tests (crates/monolock-server/tests/dashboard.rs)
# drive headless Chromium through chromedriver.
need_apt chromium chromium-driver
