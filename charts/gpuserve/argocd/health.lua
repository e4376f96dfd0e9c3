-- Argo CD health check for gpuserve.io InferenceService and AcceleratorClass.
-- Argo CD runs it with the live object in the global `obj` and reads back {status, message}.
-- It reads the kstatus conditions the operator writes (Ready, Reconciling, Stalled) and
-- status.observedGeneration; written for Lua 5.1 (Argo CD's gopher-lua) and later.
local function condition(status, kind)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function says(c, message)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    if c.reason ~= nil and c.reason ~= "" then
      return c.reason .. ": " .. c.message
    end
    return c.message
  end
  return message
end

local status = obj.status
local generation = tonumber(obj.metadata.generation or 0) or 0
local observed = status and tonumber(status.observedGeneration or -1) or -1

-- The answer Argo CD reads: a health and the condition's own words, or a fallback message.
local function verdict(health, c, message)
  return { status = health, message = says(c, message) }
end

if status == nil or status.conditions == nil then
  return verdict("Progressing", nil, "Waiting for the gpuserve operator to report status")
end

-- A status written for an older spec says nothing about the current one.
if observed < generation then
  return verdict("Progressing", nil, "Waiting for the operator to observe generation " ..
    generation .. " (observed " .. observed .. ")")
end

local stalled = condition(status, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  return verdict("Degraded", stalled, "Stalled")
end

local reconciling = condition(status, "Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  return verdict("Progressing", reconciling, "Reconciling")
end

local ready = condition(status, "Ready")
if ready == nil or ready.status == "Unknown" then
  return verdict("Progressing", ready, "Waiting for the Ready condition")
end
if ready.status == "True" then
  return verdict("Healthy", ready, "Ready")
end
-- Ready=False with nothing in progress and nothing stalled (e.g. an AcceleratorClass that
-- matches no node): it will not become ready by waiting.
return verdict("Degraded", ready, "Not ready")
