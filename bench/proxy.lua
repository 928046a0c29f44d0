-- wrk script of bench/proxy.sh: POST /tool on the echo upstream, with a small JSON body.
--   UPSTREAM=host:port  the upstream (required)
--   DIRECT=1            origin-form request straight to the upstream (wrk's URL is the upstream)
--   otherwise           absolute-form request for a forward proxy (wrk's URL is the proxy), with
--                       Host: UPSTREAM and, when PROXY_AUTH is set, Proxy-Authorization: PROXY_AUTH
--   TOOL_PATH=/tool     the path (a route of the bench pack)
--   METHOD=GET          a GET without a body instead of the POST
local upstream = os.getenv("UPSTREAM") or error("UPSTREAM=host:port is required")
local path = os.getenv("TOOL_PATH") or "/tool"
local get = os.getenv("METHOD") == "GET"
wrk.method = get and "GET" or "POST"
if not get then
  wrk.headers["Content-Type"] = "application/json"
end
wrk.headers["Host"] = upstream
if os.getenv("DIRECT") == "1" then
  wrk.path = path
else
  wrk.path = "http://" .. upstream .. path
  local auth = os.getenv("PROXY_AUTH")
  if auth and auth ~= "" then
    wrk.headers["Proxy-Authorization"] = auth
  end
end
if not get then
  wrk.body = '{"customer_id":"C-1042","note":"call back tomorrow","fields":["name","plan"]}'
end
