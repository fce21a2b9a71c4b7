<#
.SYNOPSIS
  Installs optiond for Excel on Windows: virtual environment, the package, the xlwings add-in
  with optiond's worksheet functions registered, and the daemon as a service or logon task.

.DESCRIPTION
  installer\install.ps1 [-Prefix DIR] [-Source PATH_OR_SPEC] [-Gpu] [-NoGui] [-NoService] [-LogonTask] [-Uninstall]

  1. Checks Python (>= 3.10) and that Python's bitness matches Excel's (32/64-bit), with a clear
     message on a mismatch.
  2. Creates PREFIX\venv (default %LOCALAPPDATA%\optiond) and pip-installs optiond with the
     desktop panel (the gui extra; -NoGui skips it) and the GPU extra when nvidia-smi answers (or
     with -Gpu); compiles every pricing kernel once (`optiond warmup`); puts an "optiond panel"
     shortcut in the Start Menu.
  3. Runs `xlwings addin install`, and writes the xlwings user settings
     (%USERPROFILE%\.xlwings\xlwings.conf): INTERPRETER_WIN = the venv's pythonw.exe and
     UDF MODULES = optiond.addin.functions. It then builds optiond.xlam in Excel's XLSTART folder
     from the generated VBA module so =BOPM_PUT() works in every new workbook (needs "Trust
     access to the VBA project object model"; otherwise it says how to do it by hand).
  4. Installs the daemon as the Windows service "optiond" (pywin32), or with -LogonTask as a
     scheduled task at logon; then runs `optiond status`.
  Everything added is listed in PREFIX\install-manifest.txt; -Uninstall removes exactly that.
#>
[CmdletBinding()]
param(
  [string]$Prefix = (Join-Path $env:LOCALAPPDATA "optiond"),
  [string]$Source = (Split-Path -Parent $PSScriptRoot),
  [switch]$Gpu,
  [switch]$NoGui,
  [switch]$NoService,
  [switch]$LogonTask,
  [switch]$Uninstall
)
$ErrorActionPreference = "Stop"
$Manifest = Join-Path $Prefix "install-manifest.txt"
$Venv = Join-Path $Prefix "venv"
$Py = Join-Path $Venv "Scripts\python.exe"
$Optiond = Join-Path $Venv "Scripts\optiond.exe"
$XlwingsConf = Join-Path $env:USERPROFILE ".xlwings\xlwings.conf"
$XlStart = Join-Path $env:APPDATA "Microsoft\Excel\XLSTART"
$Xlam = Join-Path $XlStart "optiond.xlam"
$PanelShortcut = Join-Path ([Environment]::GetFolderPath("Programs")) "optiond panel.lnk"

function Say($msg) { Write-Host "==> $msg" }
function Fail($msg) { Write-Error "install.ps1: $msg"; exit 1 }
function Record($kind, $path) { Add-Content -Path $Manifest -Value "$kind`t$path" }

function Set-XlwingsSetting($key, $value) {
  # xlwings.conf holds one "KEY","value" pair per line
  $dir = Split-Path -Parent $XlwingsConf
  if (-not (Test-Path $dir)) { New-Item -ItemType Directory -Path $dir | Out-Null }
  $lines = @()
  if (Test-Path $XlwingsConf) { $lines = Get-Content $XlwingsConf | Where-Object { $_ -notmatch "^`"$key`"," } }
  $lines += "`"$key`",`"$value`""
  Set-Content -Path $XlwingsConf -Value $lines -Encoding UTF8
}

if ($Uninstall) {
  if (-not (Test-Path $Manifest)) { Fail "nothing to uninstall: no $Manifest" }
  foreach ($line in Get-Content $Manifest) {
    $kind, $path = $line -split "`t", 2
    switch ($kind) {
      "service"  { & $Optiond service windows stop 2>$null; & $Optiond service windows remove 2>$null }
      "task"     { Unregister-ScheduledTask -TaskName $path -Confirm:$false -ErrorAction SilentlyContinue }
      "xlsetting" { if (Test-Path $XlwingsConf) { Set-Content $XlwingsConf (Get-Content $XlwingsConf | Where-Object { $_ -notmatch "^`"$path`"," }) } }
      "file"     { Remove-Item -Force -ErrorAction SilentlyContinue $path }
      "dir"      { Remove-Item -Recurse -Force -ErrorAction SilentlyContinue $path }
    }
  }
  Remove-Item -Force $Manifest
  Remove-Item -Force -ErrorAction SilentlyContinue $Prefix
  Say "optiond removed"
  exit 0
}

# ---- 1. Python and Excel versions and bitness
$python = (Get-Command py -ErrorAction SilentlyContinue)
$pyArgs = @("-3")
if (-not $python) { $python = Get-Command python -ErrorAction SilentlyContinue; $pyArgs = @() }
if (-not $python) { Fail "Python 3.10 or newer is needed: install it from python.org (same bitness as Excel)" }
$pyInfo = & $python.Source @pyArgs -c "import struct,sys; print(sys.version_info[0], sys.version_info[1], struct.calcsize('P')*8)"
$major, $minor, $pyBits = $pyInfo -split " "
if ([int]$major -lt 3 -or ([int]$major -eq 3 -and [int]$minor -lt 10)) { Fail "Python >= 3.10 needed, found $major.$minor" }
$excelBits = $null
foreach ($key in "HKLM:\SOFTWARE\Microsoft\Office\ClickToRun\Configuration", "HKLM:\SOFTWARE\Microsoft\Office\16.0\Outlook") {
  $item = Get-ItemProperty -Path $key -ErrorAction SilentlyContinue
  if ($item.Platform) { $excelBits = if ($item.Platform -eq "x64") { 64 } else { 32 }; break }
  if ($item.Bitness) { $excelBits = if ($item.Bitness -eq "x64") { 64 } else { 32 }; break }
}
if (-not $excelBits) { Write-Warning "Excel not found (or its bitness unknown): installing the daemon and CLI only" }
elseif ([int]$pyBits -ne $excelBits) {
  Fail "Python is $pyBits-bit but Excel is $excelBits-bit: install the $excelBits-bit Python 3.10+ and run this again"
}

# ---- 2. virtual environment and package
New-Item -ItemType Directory -Force -Path $Prefix | Out-Null
if (-not (Test-Path $Manifest)) { New-Item -ItemType File -Path $Manifest | Out-Null }
if (-not (Test-Path $Venv)) { & $python.Source @pyArgs -m venv $Venv; Record "dir" $Venv }
& $Py -m pip install -q --upgrade pip
$extras = @()
if ($Gpu -or (Get-Command nvidia-smi -ErrorAction SilentlyContinue)) { $extras += "gpu"; Say "NVIDIA GPU: installing the GPU extra" }
if (-not $NoGui) { $extras += "gui" }
$extra = if ($extras) { "[" + ($extras -join ",") + "]" } else { "" }
& $Py -m pip install -q "$Source$extra"
if ($LASTEXITCODE -ne 0) { Fail "pip install failed" }
# every pricing kernel compiled once into numba's on-disk cache, before Excel or the daemon needs it
Say "compiling the pricing kernels once (optiond warmup; a minute or two)"
& $Optiond warmup
if ($LASTEXITCODE -ne 0) { Say "the warm-up did not finish: the first run compiles what is missing" }

# ---- 2b. the panel in the Start Menu (the windowless optiond-panel.exe)
if (-not $NoGui) {
  $shell = New-Object -ComObject WScript.Shell
  $lnk = $shell.CreateShortcut($PanelShortcut)
  $lnk.TargetPath = Join-Path $Venv "Scripts\optiond-panel.exe"
  $lnk.WorkingDirectory = $env:USERPROFILE
  $lnk.Description = "optiond panel: daemon status, request timings, batch pricing"
  $lnk.Save()
  Record "file" $PanelShortcut
  Say "Start Menu shortcut: $PanelShortcut"
}

# ---- 3. Excel: xlwings add-in, settings, optiond.xlam
if ($excelBits) {
  & (Join-Path $Venv "Scripts\xlwings.exe") addin install
  Set-XlwingsSetting "INTERPRETER_WIN" (Join-Path $Venv "Scripts\pythonw.exe"); Record "xlsetting" "INTERPRETER_WIN"
  Set-XlwingsSetting "UDF MODULES" "optiond.addin.functions"; Record "xlsetting" "UDF MODULES"
  $vbaDir = & $Py -c "import optiond.addin.generate as g; print(g.VBA_DIR)"
  try {
    $excel = New-Object -ComObject Excel.Application
    $excel.DisplayAlerts = $false
    $wb = $excel.Workbooks.Add()
    $wb.VBProject.References.AddFromFile((Join-Path $XlStart "xlwings.xlam")) | Out-Null
    # the UDF wrappers xlwings generates, and the macro that gives Excel's wizard the argument texts
    $wb.VBProject.VBComponents.Import((Join-Path $vbaDir "xlwings_udfs.bas")) | Out-Null
    $wb.VBProject.VBComponents.Import((Join-Path $vbaDir "optiond_register.bas")) | Out-Null
    $wb.VBProject.VBComponents.Item("ThisWorkbook").CodeModule.AddFromString(
      "Private Sub Workbook_Open()`r`n    OptiondRegisterFunctions`r`nEnd Sub") | Out-Null
    $wb.SaveAs($Xlam, 55)  # xlOpenXMLAddIn
    $wb.Close($false); $excel.Quit()
    Record "file" $Xlam
    Say "worksheet functions installed: $Xlam"
  } catch {
    Write-Warning ("Could not build optiond.xlam ($($_.Exception.Message)). In Excel: File > Options > Trust Center > " +
      "Macro Settings > 'Trust access to the VBA project object model', then run this again; or open a workbook and " +
      "click xlwings > Import Functions.")
  }
}

# ---- 4. the daemon as a service or logon task
if (-not $NoService) {
  if ($LogonTask) {
    $action = New-ScheduledTaskAction -Execute $Optiond -Argument "serve"
    $trigger = New-ScheduledTaskTrigger -AtLogOn -User $env:USERNAME
    $settings = New-ScheduledTaskSettingsSet -RestartCount 3 -RestartInterval (New-TimeSpan -Minutes 1)
    Register-ScheduledTask -TaskName "optiond" -Action $action -Trigger $trigger -Settings $settings -Force | Out-Null
    Record "task" "optiond"
    Start-ScheduledTask -TaskName "optiond"
  } else {
    & $Optiond service windows --startup auto install
    if ($LASTEXITCODE -ne 0) { Fail "service install failed (run as Administrator, or use -LogonTask)" }
    Record "service" "optiond"
    & $Optiond service windows start
  }
}
Say ("installed: " + (& $Optiond --version))
& $Optiond status
exit 0
