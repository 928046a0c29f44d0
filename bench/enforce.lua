-- wrk script: POST a typical EnforcementRequest (in scope, one argument) with the key from $KEY.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-API-Key"] = os.getenv("KEY") or ""
wrk.body = '{"agent_id":"bench-agent","tenant_id":"bench","tool_name":"crm.lookup","session_id":"s-1",' ..
  '"user_id":"u-1","approved_scope":["crm.lookup","email.send"],"session_tool_calls":["crm.lookup"],' ..
  '"enforcement_mode":"block","tool_args":{"customer_id":"C-1042","fields":["name","plan"]}}'
