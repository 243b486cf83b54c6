--[[
gpumeter admission for Slurm (JobSubmitPlugins=lua): before slurmctld
accepts a job that asks for GPUs, ask gpumeter's POST /v1/admission whether
the job's tenant may start that many GPUs of that model for the job's time
limit, and, for a credit_only customer, whether its credit pays for them
(docs/slurm.md, docs/quotas.md, docs/credits.md). Jobs without GPUs, and jobs of
accounts the config does not name (unless unmapped = "account"), are not
asked about.

Install beside slurm.conf as job_submit.lua, with its config beside it as
gpumeter-admission.conf (a Lua file returning a table):

  return {
    url = "https://gpumeter.example:8443/v1/admission",
    curl_config = "/etc/slurm/gpumeter-curl.conf", -- header = "Authorization: Bearer <key>"
    timeout_seconds = 2,
    on_error = "deny",            -- server unreachable or a 5xx: "deny" or "allow"
    default_duration = "1h",      -- jobs without --time
    accounts = { physics = "uni-physics" },  -- Slurm account -> gpumeter tenant
    unmapped = "skip",            -- other accounts: "skip" (not asked) or "account" (the account is the tenant)
    models = { a100 = "A100-SXM4-80GB", h100 = "H100-SXM5-80GB" },  -- GRES type -> GPU model
    untyped_model = "A100-SXM4-80GB",  -- GPUs asked for without a type
  }

Without the config file every job is accepted (logged once). The key in
curl_config must be readable by SlurmUser only; it is never on a command
line. A job the server admits carries the admission's id in its
AdminComment (gpumeter_admission=<id>): Slurm has no job id yet at submit
time.
]]

local NO_VAL = 4294967294
local INFINITE = 4294967295 -- --time=UNLIMITED
local NO_VAL16 = 65534

local function script_dir()
	local src = debug.getinfo(1, "S").source
	if src:sub(1, 1) == "@" then
		return src:sub(2):match("^(.*)/[^/]*$") or "."
	end
	return "."
end

local config_path = script_dir() .. "/gpumeter-admission.conf"
local warned_missing = false

local function load_config()
	local f = io.open(config_path, "r")
	if not f then
		if not warned_missing then
			slurm.log_info("gpumeter: no %s: GPU jobs are not checked", config_path)
			warned_missing = true
		end
		return nil
	end
	f:close()
	warned_missing = false
	local ok, cfg = pcall(dofile, config_path)
	if not ok or type(cfg) ~= "table" or type(cfg.url) ~= "string" then
		slurm.log_error("gpumeter: %s: %s", config_path, tostring(ok and "want a table with url" or cfg))
		return { broken = true, on_error = "deny" }
	end
	return cfg
end

-- gpu_requests returns {type -> count} from the job's GPU requests:
-- --gres / --gpus-per-node (tres_per_node, times the node count), --gpus
-- (tres_per_job), --gpus-per-task (tres_per_task, times the task count),
-- --gpus-per-socket (tres_per_socket, times sockets and nodes). Entries
-- read "gres:gpu:a100:2", "gres/gpu:a100=2", "gpu:2" or "gres:gpu"
-- (one).
local function add_gpus(out, spec, factor)
	if spec == nil or spec == "" then
		return
	end
	for item in string.gmatch(spec, "[^,]+") do
		local s = item:gsub("^gres[:/]", "")
		if s:match("^gpu") and not s:match("^gpu[%w]") then
			s = s:gsub("^gpu[:=]?", "")
			local typ, n = s:match("^([^:=]+)[:=](%d+)$")
			if not typ then
				n = s:match("^(%d+)$")
				typ = ""
				if not n then
					if s == "" then
						n = "1"
					else
						typ, n = s, "1"
					end
				end
			end
			out[typ] = (out[typ] or 0) + tonumber(n) * factor
		end
	end
end

local function set_or(v, default)
	if v == nil or v == NO_VAL or v == INFINITE or v == NO_VAL16 or v == 0 then
		return default
	end
	return v
end

local function gpu_requests(job)
	local out = {}
	local nodes = set_or(job.min_nodes, 1)
	local tasks = set_or(job.num_tasks, 1)
	local sockets = set_or(job.sockets_per_node, 1)
	add_gpus(out, job.tres_per_node, nodes)
	add_gpus(out, job.tres_per_job, 1)
	add_gpus(out, job.tres_per_task, tasks)
	add_gpus(out, job.tres_per_socket, sockets * nodes)
	return out
end

local function json_string(s)
	s = tostring(s):gsub('[%c"\\]', function(c)
		if c == '"' then return '\\"' end
		if c == "\\" then return "\\\\" end
		return string.format("\\u%04x", c:byte())
	end)
	return '"' .. s .. '"'
end

local function shell_quote(s)
	return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- ask posts one request and returns status, body (status 0: no answer).
local function ask(cfg, body)
	local cmd = "curl -sS --max-time " .. tonumber(cfg.timeout_seconds or 2)
		.. " -X POST -H 'Content-Type: application/json'"
		.. (cfg.curl_config and (" -K " .. shell_quote(cfg.curl_config)) or "")
		.. " --data-binary " .. shell_quote(body)
		.. " -w '\\n%{http_code}' " .. shell_quote(cfg.url) .. " 2>&1"
	local p = io.popen(cmd, "r")
	if not p then
		return 0, "cannot run curl"
	end
	local out = p:read("*a") or ""
	p:close()
	local resp, code = out:match("^(.*)\n(%d%d%d)$")
	if not code then
		return 0, out
	end
	return tonumber(code), resp
end

local function failed(cfg, why)
	if cfg.on_error == "allow" then
		slurm.log_error("gpumeter: admission unavailable (%s): job accepted (on_error = allow)", why)
		return slurm.SUCCESS
	end
	slurm.log_error("gpumeter: admission unavailable (%s): job refused (on_error = deny)", why)
	slurm.log_user("gpumeter: GPU admission is unavailable (%s); try again later", why)
	return slurm.ERROR
end

function slurm_job_submit(job, part_list, submit_uid)
	local gpus = gpu_requests(job)
	if next(gpus) == nil then
		return slurm.SUCCESS
	end
	local cfg = load_config()
	if cfg == nil then
		return slurm.SUCCESS
	end
	if cfg.broken then
		return failed(cfg, "broken config " .. config_path)
	end
	local account = job.account or job.default_account or ""
	local tenant = (cfg.accounts or {})[account]
	if tenant == nil then
		if cfg.unmapped ~= "account" or account == "" then
			return slurm.SUCCESS
		end
		tenant = account
	end
	local minutes = set_or(job.time_limit, nil) -- unset or UNLIMITED: default_duration
	local duration = cfg.default_duration or "1h"
	if minutes ~= nil then
		duration = tostring(minutes) .. "m"
	end
	-- Every GPU type of the job in one admission, decided together: a job
	-- whose second type is over quota holds nothing of the first.
	local parts, asked = {}, {}
	for typ, count in pairs(gpus) do
		local model = (cfg.models or {})[typ]
		if typ == "" then
			model = cfg.untyped_model
		end
		if model == nil then
			slurm.log_user("gpumeter: GPU type %q has no model in %s", typ, config_path)
			return slurm.ERROR
		end
		table.insert(parts, "{\"gpu_model\":" .. json_string(model) .. ",\"count\":" .. string.format("%d", count) .. "}")
		table.insert(asked, string.format("%d %s", count, model))
	end
	if #parts == 0 then
		return slurm.SUCCESS
	end
	local body = "{\"tenant\":" .. json_string(tenant) .. ",\"parts\":[" .. table.concat(parts, ",")
		.. "],\"expected_duration\":" .. json_string(duration) .. "}"
	slurm.log_debug("gpumeter: asking %s for %s", cfg.url, body)
	local code, resp = ask(cfg, body)
	if code == 0 or code >= 500 then
		return failed(cfg, code == 0 and resp:gsub("%s+$", "") or ("HTTP " .. code))
	end
	if code ~= 200 then
		slurm.log_error("gpumeter: admission for tenant %s: HTTP %d: %s", tenant, code, resp)
		slurm.log_user("gpumeter: admission refused the request (HTTP %d): %s", code, resp)
		return slurm.ERROR
	end
	local allowed = resp:match('"allowed"%s*:%s*(%a+)')
	local reason = resp:match('"reason"%s*:%s*"(.-[^\\])"') or ""
	if allowed ~= "true" then
		slurm.log_info("gpumeter: denied %s for tenant %s (account %s, uid %d): %s", table.concat(asked, " + "), tenant, account, submit_uid, reason)
		slurm.log_user("gpumeter: denied: %s", reason ~= "" and reason or "over quota")
		return slurm.ERROR
	end
	local id = resp:match('"admission_id"%s*:%s*"([^"]*)"')
	if id and id ~= "" then
		local note = "gpumeter_admission=" .. id
		if job.admin_comment and job.admin_comment ~= "" then
			note = job.admin_comment .. " " .. note
		end
		job.admin_comment = note
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

return slurm.SUCCESS
