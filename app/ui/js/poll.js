// Refreshing a view: one refresh at a time, paused while the tab is hidden.

/**
 * Run `task` now and then `intervalMs()` after each run ends, until the returned function
 * is called. A run never overlaps the previous one, so a slow server is not piled on; a
 * hidden tab stops polling and refreshes at once when shown again.
 */
export function poll(task, intervalMs) {
  let stopped = false;
  let running = false;
  let timer = null;

  async function run() {
    timer = null;
    if (stopped || running || document.hidden) return;
    running = true;
    try {
      await task();
    } catch (error) {
      // A view shows its own errors; one that escapes must not end the polling.
      console.warn("refresh failed", error);
    } finally {
      running = false;
    }
    if (!stopped && !document.hidden) timer = setTimeout(run, intervalMs());
  }

  function onVisibility() {
    if (!document.hidden && timer === null) run();
  }

  document.addEventListener("visibilitychange", onVisibility);
  run();
  return function stop() {
    stopped = true;
    clearTimeout(timer);
    document.removeEventListener("visibilitychange", onVisibility);
  };
}

/**
 * How often to refresh live figures: as often as the usage history is sampled, but at least
 * every 5 s (a new sample then shows within 5 s of being taken) and at most every second.
 */
export function refreshInterval(session) {
  return Math.min(5, Math.max(1, session.usageResolutionSeconds)) * 1000;
}
