Attribute VB_Name = "optiond_register"
' Generated from optiond.addin.table - do not edit; regenerate with
'     python -m optiond.addin.table --write-vba
Option Explicit

Public Sub OptiondRegisterFunctions()
    On Error Resume Next
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BOPM_PUT", _
        Description:="Put price on a Cox-Ross-Rubinstein binomial tree with N steps, American (default) or European, with a continuous dividend yield. Ranges in any argument return a range of prices.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365).", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%).", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 10.", _
            "Steps of the binomial tree, a whole number from 1 to 10,000,000. More steps: more accurate and slower (time grows as N squared); 200 to 2000 is typical.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%); default 0.", _
            "Optional. TRUE for American exercise (the default), FALSE for European.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BOPM_CALL", _
        Description:="Call price on a Cox-Ross-Rubinstein binomial tree with N steps, American (default) or European, with a continuous dividend yield. Ranges in any argument return a range of prices.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365).", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%).", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 10.", _
            "Steps of the binomial tree, a whole number from 1 to 10,000,000. More steps: more accurate and slower (time grows as N squared); 200 to 2000 is typical.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%); default 0.", _
            "Optional. TRUE for American exercise (the default), FALSE for European.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BS_PUT", _
        Description:="Black-Scholes-Merton price of a European put with a continuous dividend yield (closed form). Ranges in any argument return a range of prices.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365).", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%).", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 10.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%); default 0.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BS_CALL", _
        Description:="Black-Scholes-Merton price of a European call with a continuous dividend yield (closed form). Ranges in any argument return a range of prices.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365).", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%).", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 10.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%); default 0.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BOPM_IV", _
        Description:="Implied volatility of an option from its price, by a bracketed root find on the binomial tree price (American by default). Returns an annualised decimal (0.2 = 20%).", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Market price of the option (> 0), in the currency of S. A cell or a range.", _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365).", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%).", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%); default 0.", _
            "Optional. ""call"" (the default) or ""put"".", _
            "Optional. Steps of the binomial tree, 1 to 10,000,000; default 1000. Time grows as N squared.", _
            "Optional. TRUE for American exercise (the default), FALSE for European.")
    Application.MacroOptions Macro:="'" & ThisWorkbook.Name & "'!BOPM_GREEKS", _
        Description:="Greeks from a binomial tree, one row per option: delta, gamma, theta (per year), vega (per 1.00 of volatility), rho (per 1.00 of rate). Give a column of inputs for one row per option.", _
        Category:="optiond", _
        ArgumentDescriptions:=Array( _
            "Spot price of the underlying (> 0). A cell or a range: ranges broadcast against the other arguments and return a range of the same shape.", _
            "Strike price (> 0), in the currency of S. A column of strikes returns a column of results.", _
            "Time to expiry in years (> 0), e.g. 0.25 for three months (ACT/365).", _
            "Risk-free rate, annual and continuously compounded, as a decimal (0.05 = 5%).", _
            "Volatility, annualised, as a decimal (0.2 = 20%); > 0 and <= 10.", _
            "Steps of the binomial tree, a whole number from 1 to 10,000,000. More steps: more accurate and slower (time grows as N squared); 200 to 2000 is typical.", _
            "Optional. Continuous dividend yield, annual, as a decimal (0.02 = 2%); default 0.", _
            "Optional. ""call"" (the default) or ""put"".", _
            "Optional. TRUE for American exercise (the default), FALSE for European.")
End Sub
