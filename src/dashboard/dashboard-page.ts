/**
 * The dashboard's two HTML pages. No inline script or style (the CSP forbids
 * them); the page's data comes from api/state and api/events, rendered by
 * assets/dashboard.js with textContent only. URLs are relative so that the
 * pages work under any base path.
 */

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const head = (title: string, extra = ''): string => `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<title>${escapeHtml(title)}</title>
<link rel="stylesheet" href="assets/dashboard.css">
${extra}</head>`;

/** The dashboard; `csrf` goes back in X-CSRF-Token with every POST. */
export function dashboardPage(csrf: string, who: string, canLogOut: boolean): string {
  return `${head('txbox dashboard', `<meta name="txbox-csrf" content="${escapeHtml(csrf)}">\n<script type="module" src="assets/dashboard.js"></script>\n`)}
<body>
<header>
  <h1>txbox</h1>
  <span id="live" class="live" data-state="connecting">connecting</span>
  <span class="who">signed in as ${escapeHtml(who)}</span>
  ${canLogOut ? '<button id="logout" type="button">Log out</button>' : ''}
</header>
<main>
  <div id="error" class="error" role="alert" hidden></div>
  <div id="notice" class="notice" role="status" hidden></div>
  <section id="totals" class="cards" aria-label="totals"></section>
  <section class="charts">
    <figure><figcaption>Backlog (pending events) per destination</figcaption><svg id="chart-backlog" role="img" aria-label="backlog over time"></svg><div id="legend-backlog" class="legend"></div></figure>
    <figure><figcaption>Published per minute, per destination</figcaption><svg id="chart-rate" role="img" aria-label="publish rate over time"></svg><div id="legend-rate" class="legend"></div></figure>
  </section>
  <section><h2>Destinations</h2><table id="destinations"></table></section>
  <section><h2>Relays and bucket leases</h2><table id="relays"></table><div id="circuits"></div></section>
  <section><h2>Parked events</h2><table id="parked"></table></section>
  <section id="inbox" hidden>
    <h2>Inbox</h2><table id="inbox-consumers"></table>
    <h3>Dead events</h3><table id="inbox-dead"></table>
    <h3>Held events</h3><table id="inbox-held"></table>
  </section>
</main>
</body>
</html>
`;
}

/** The login form: the token is posted to login, which sets an HttpOnly SameSite=Strict session cookie. */
export function loginPage(problem: string | null): string {
  return `${head('txbox dashboard: log in')}
<body class="login">
<main>
  <h1>txbox dashboard</h1>
  <form method="post" action="login">
    <label for="token">Access token</label>
    <input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
    <button type="submit">Log in</button>
    ${problem ? `<p class="error" role="alert">${escapeHtml(problem)}</p>` : ''}
  </form>
</main>
</body>
</html>
`;
}
