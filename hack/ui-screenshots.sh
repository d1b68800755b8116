#!/usr/bin/env bash
# Screenshots of `kubectl hossted ui` for the README and docs/ui.md: runs
# the browser test (a real control plane, the operator, headless Chromium)
# with its screenshots pointed at docs/images, then keeps the four main
# pages, the overview on a phone in dark mode and the served view's
# overview, timeline and logs. Commit what changed.
#
#   hack/ui-screenshots.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)"
export KUBEBUILDER_ASSETS
shots="$(mktemp -d)"
trap 'rm -rf "$shots"' EXIT
HOSSTED_UI_SCREENSHOTS="$shots" cargo test --test it -- --exact \
  ui::browser::the_ui_in_a_real_browser_shows_states_approves_and_updates_live \
  ui::served::in_chromium_alice_signs_in_at_the_provider_reconciles_and_signs_out \
  ui::served::in_chromium_the_resource_tree_and_pod_logs_are_shown_as_text
for page in overview helmapp pending helmappset overview-phone-dark \
  served-overview served-timeline served-logs; do
  cp "$shots/ui-$page.png" "docs/images/ui-$page.png"
done
ls -l docs/images/ui-*.png
