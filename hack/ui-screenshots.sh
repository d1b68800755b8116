#!/usr/bin/env bash
# Screenshots of `kubectl hossted ui` for the README and docs/ui.md: runs
# the browser test (a real control plane, the operator, headless Chromium)
# with its screenshots pointed at docs/images, then keeps the four main
# pages and the overview on a phone in dark mode. Commit what changed.
#
#   hack/ui-screenshots.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
shots="$(mktemp -d)"
trap 'rm -rf "$shots"' EXIT
HOSSTED_UI_SCREENSHOTS="$shots" cargo test --test it -- --exact \
  ui::browser::the_ui_in_a_real_browser_shows_states_approves_and_updates_live
for page in overview helmapp pending helmappset overview-phone-dark; do
  cp "$shots/ui-$page.png" "docs/images/ui-$page.png"
done
ls -l docs/images/ui-*.png
