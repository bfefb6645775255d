//! Dashboard tabs from plugins, as a user adds one: a folder under `$TROUPE_HOME/plugins/` with
//! a `dashboard/manifest.json`, its module and style sheet, and a route answered by a shell
//! script. `troupe plugins list` shows what each provides; `troupe serve` lists the tabs, runs
//! the route behind the token (refused without it), serves the assets with the dashboard's
//! Content-Security-Policy, and keeps a tab whose manifest is broken off, with its reason,
//! while the others work. In Chromium the tab appears, draws what its route answered, and a
//! screenshot goes to `target/tmp/dashboard/plugin-tab.png`. A user plugin named
//! `achievements` replaces the bundled one.

use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use crate::support::browser::{Browser, browser_available, screenshots};
use crate::support::serve::{Served, TOKEN, TroupeDir};

const YAML: &str =
    "model:\n  base_url: \"{{MODEL_URL}}\"\n  model: mock-model\nkanban:\n  store: \"{{STORE}}\"\n";

const STEP: Duration = Duration::from_secs(60);

/// The tab's module: asks its route for a greeting and shows it.
const MAIN_JS: &str = r#"export function mount(root, ctx) {
  const p = document.createElement("p");
  p.id = "hello-greeting";
  p.className = "hello-box";
  p.textContent = "asking…";
  root.append(p);
  ctx.get("greeting/browser?mood=sunny").then((answer) => {
    p.textContent = `${answer.greeting}, ${answer.request.params.who} (${answer.request.query.mood})`;
    root.dataset.greeted = "true";
  }, (e) => { p.textContent = `failed: ${e.message}`; });
}
"#;

/// The route's program: echoes the request it was given inside its answer.
const GREET_SH: &str = "#!/bin/sh\nread -r request\nprintf '{\"greeting\": \"hello from the hello plugin\", \"request\": %s}\\n' \"$request\"\n";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The user plugins: `hello` (a tab and a route), `broken` (a manifest naming no entry) and
/// `achievements` (a user tab replacing the bundled one).
fn user_plugins(home: &Path) {
    let hello = home.join("plugins/hello");
    write(
        &hello.join("dashboard/manifest.json"),
        r#"{"label": "Hello", "entry": "main.js", "styles": ["hello.css"],
            "routes": [{"method": "GET", "path": "greeting/{who}", "command": "./greet.sh", "timeout": "10s"},
                       {"method": "POST", "path": "fail", "command": "echo it went wrong >&2; exit 3"},
                       {"method": "GET", "path": "garbage", "command": "echo this is not json"}]}"#,
    );
    write(&hello.join("dashboard/main.js"), MAIN_JS);
    write(
        &hello.join("dashboard/hello.css"),
        ".hello-box { font-size: 28px; color: rgb(0, 128, 0); padding: 24px; }\n",
    );
    write(&hello.join("greet.sh"), GREET_SH);
    write(&hello.join("secret.txt"), "not an asset\n");
    // A link out of the dashboard folder is not served.
    std::os::unix::fs::symlink(hello.join("secret.txt"), hello.join("dashboard/leak.js")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        hello.join("greet.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();

    write(
        &home.join("plugins/broken/dashboard/manifest.json"),
        r#"{"label": "Broken"}"#,
    );

    let mine = home.join("plugins/achievements");
    write(
        &mine.join("dashboard/manifest.json"),
        r#"{"label": "My badges", "entry": "mine.js"}"#,
    );
    write(
        &mine.join("dashboard/mine.js"),
        "export function mount(root) { root.textContent = 'mine'; }\n",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_plugin_adds_a_tab_and_a_route_and_a_broken_one_stays_off_alone() {
    let dir = TroupeDir::new(YAML, "turns: []\n").await;
    user_plugins(dir.home());

    // The listing says what each provides and why the broken tab is off.
    let listed = dir.run_json(&["plugins", "list"]).await;
    let plugins = listed["plugins"].as_array().unwrap();
    let find = |name: &str| {
        plugins
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {listed}"))
            .clone()
    };
    let hello = find("hello");
    assert_eq!(hello["source"], "user");
    assert_eq!(hello["dashboard"]["label"], "Hello");
    assert_eq!(hello["dashboard"]["routes"][0], "GET greeting/{who}");
    // `plugins.disabled` turns a tab off.
    std::fs::write(
        dir.path().join("off.yaml"),
        "plugins:\n  disabled: [hello]\n",
    )
    .unwrap();
    let off = dir
        .run_json(&["plugins", "list", "--config", "off.yaml"])
        .await;
    let off_hello = off["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "hello")
        .unwrap()
        .clone();
    assert_eq!(off_hello["dashboard"]["shown"], false, "{off_hello}");
    assert_eq!(hello["dashboard"]["shown"], true);
    let broken = find("broken");
    assert_eq!(broken["dashboard"]["shown"], false);
    assert!(
        broken["dashboard"]["problem"]
            .as_str()
            .unwrap()
            .contains("`entry` is missing"),
        "{broken}"
    );
    // A broken tab is not a broken plugin: nothing else of it is disabled.
    assert_eq!(broken["problems"], Value::Array(Vec::new()));
    let mine = find("achievements");
    assert_eq!(mine["source"], "user");
    assert_eq!(mine["hides"][0]["source"], "bundled");
    assert_eq!(mine["dashboard"]["label"], "My badges");
    let (code, table, err) = dir.run(&["plugins", "list"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        table.contains("dashboard tab: Hello (routes: GET greeting/{who}, POST fail, GET garbage)"),
        "{table}"
    );
    assert!(table.contains("dashboard tab: disabled:"), "{table}");

    let served = Served::start(&dir, &["--no-dispatch"]).await;
    assert!(
        served
            .log()
            .iter()
            .any(|l| l.contains("the dashboard tab of plugin 'broken' is disabled")),
        "{:?}",
        served.log()
    );

    // The tab list: hello and the user's achievements work, broken says why it is off.
    let (status, tabs) = served.call(Method::GET, "/api/dashboard/tabs", None).await;
    assert_eq!(status, 200, "{tabs}");
    let tab = |name: &str| {
        tabs["tabs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no {name} tab in {tabs}"))
            .clone()
    };
    assert_eq!(tab("hello")["entry"], "/dashboard/plugins/hello/main.js");
    assert_eq!(tab("hello")["problem"], Value::Null);
    assert!(tab("broken")["problem"].as_str().unwrap().contains("entry"));
    assert_eq!(tab("achievements")["source"], "user");
    assert_eq!(tab("achievements")["label"], "My badges");

    // The route runs behind the token only.
    let route = format!("{}/api/plugins/hello/greeting/ada?mood=calm", served.base);
    for request in [
        reqwest::Client::new().get(&route),
        reqwest::Client::new()
            .get(&route)
            .bearer_auth("wrong-token-0123456789abcdef"),
    ] {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401);
    }
    let (status, greeting) = served
        .call(
            Method::GET,
            "/api/plugins/hello/greeting/ada?mood=calm",
            None,
        )
        .await;
    assert_eq!(status, 200, "{greeting}");
    assert_eq!(greeting["greeting"], "hello from the hello plugin");
    assert_eq!(greeting["request"]["params"]["who"], "ada");
    assert_eq!(greeting["request"]["query"]["mood"], "calm");
    assert_eq!(greeting["request"]["method"], "GET");
    // A program that fails, or prints something that is not JSON, answers 502 saying so.
    let (status, body) = served
        .call(
            Method::POST,
            "/api/plugins/hello/fail",
            Some(serde_json::json!({"x": 1})),
        )
        .await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "plugin_route_failed");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("it went wrong"),
        "{body}"
    );
    let (status, body) = served
        .call(Method::GET, "/api/plugins/hello/garbage", None)
        .await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not JSON"),
        "{body}"
    );
    // Unknown routes and plugins, and the broken tab, answer with what is there instead.
    let (status, body) = served
        .call(Method::POST, "/api/plugins/hello/greeting/ada", None)
        .await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("GET greeting/{who}")
    );
    let (status, body) = served
        .call(Method::GET, "/api/plugins/broken/anything", None)
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "plugin_tab_disabled");
    let (status, body) = served
        .call(Method::GET, "/api/plugins/nobody/x", None)
        .await;
    assert_eq!(status, 404, "{body}");
    // The user's achievements replaced the bundled one, routes and all.
    let (status, body) = served
        .call(Method::GET, "/api/plugins/achievements/achievements", None)
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "plugin_route_not_found");
    // The board's own routes are untouched.
    let (status, _) = served
        .call(Method::GET, "/api/plugins/kanban/boards", None)
        .await;
    assert_eq!(status, 200);

    // Assets: served without the token, with the dashboard's policy; nothing outside the
    // dashboard folder, nothing of a broken tab.
    let page_policy = reqwest::get(format!("{}/", served.base))
        .await
        .unwrap()
        .headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    let asset = reqwest::get(format!("{}/dashboard/plugins/hello/main.js", served.base))
        .await
        .unwrap();
    assert_eq!(asset.status(), 200);
    assert_eq!(
        asset.headers()["content-security-policy"].to_str().unwrap(),
        page_policy
    );
    assert!(
        asset.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    assert_eq!(asset.text().await.unwrap(), MAIN_JS);
    // The client resolves a plain `..` itself: the request leaves the tab's folder and lands
    // on the API, which wants the token.
    let status = reqwest::get(format!(
        "{}/dashboard/plugins/hello/../secret.txt",
        served.base
    ))
    .await
    .unwrap()
    .status();
    assert!(!status.is_success(), "{status}");
    for path in [
        "/dashboard/plugins/hello/x%2F..%2F..%2Fgreet.sh",
        "/dashboard/plugins/hello/leak.js",
        "/dashboard/plugins/hello/manifest.json.bak",
        "/dashboard/plugins/broken/manifest.json",
        "/dashboard/plugins/nobody/main.js",
    ] {
        let status = reqwest::get(format!("{}{path}", served.base))
            .await
            .unwrap()
            .status();
        assert_eq!(status, 404, "{path}");
    }

    if !browser_available("plugin_tabs") {
        served.stop().await;
        return;
    }
    let page = Browser::launch().await.unwrap();
    page.navigate(&format!("{}/", served.base)).await.unwrap();
    page.sign_in(TOKEN).await.unwrap();
    page.wait_for("document.body.dataset.pluginTabs === '3'", STEP)
        .await
        .unwrap();
    page.click("#tab-plugin-hello").await.unwrap();
    page.wait_for(
        "document.getElementById('view-plugin-hello').dataset.greeted === 'true'",
        STEP,
    )
    .await
    .unwrap();
    let shown = page
        .eval("document.getElementById('hello-greeting').textContent")
        .await
        .unwrap();
    assert_eq!(shown, "hello from the hello plugin, browser (sunny)");
    // Its style sheet applies (loaded from troupe, allowed by the policy).
    let color = page
        .eval("getComputedStyle(document.getElementById('hello-greeting')).color")
        .await
        .unwrap();
    assert_eq!(color, "rgb(0, 128, 0)");
    assert_eq!(
        page.eval("document.getElementById('view-board').hidden")
            .await
            .unwrap(),
        true
    );
    std::fs::create_dir_all(screenshots()).unwrap();
    page.screenshot(&screenshots().join("plugin-tab.png"))
        .await
        .unwrap();

    // The broken tab shows why; the board comes back with its own tab.
    page.click("#tab-plugin-broken").await.unwrap();
    let note = page
        .wait_for(
            "(() => { const v = document.getElementById('view-plugin-broken'); return !v.hidden && v.textContent; })()",
            STEP,
        )
        .await
        .unwrap();
    assert!(
        note.as_str().unwrap().contains("This tab is disabled"),
        "{note}"
    );
    assert!(note.as_str().unwrap().contains("entry"), "{note}");
    page.click("#tab-board").await.unwrap();
    page.wait_for(
        "!document.getElementById('view-board').hidden && document.getElementById('view-plugin-broken').hidden",
        STEP,
    )
    .await
    .unwrap();
    // Nothing the page or the plugin loaded came from anywhere but the server.
    let host = served.base.trim_start_matches("http://").to_string();
    for url in page.requests() {
        assert!(
            url.starts_with(&format!("http://{host}/"))
                || url.starts_with(&format!("ws://{host}/"))
                || url == "about:blank",
            "{url}"
        );
    }
    let console = page.console();
    assert!(
        !console
            .iter()
            .any(|l| l.contains("Content Security Policy")),
        "{console:?}"
    );
    served.stop().await;
}
